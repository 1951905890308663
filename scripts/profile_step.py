"""Where a mini-batch training step's host time goes: cProfile over steps of
the 2-layer model of the bench's mini-batch cases, a new edge_index every
step (or, with --same-graph, each batch's own tensor: cached graphs), for
our layers and PyG's, with the step's wall time and CUDA kernel count.

    python scripts/profile_step.py --cases gcn,sage-mean,gatv2,transformer --size small

Run on a GPU host from a source checkout (PYTHONPATH=src); a diagnosis tool,
not a benchmark (step timings against PyG come from python -m pyg_ioaware.bench).

With --copies N it also lists, for ours, the N most frequent copy and cast
ops of a step (autocast's casts, .to, .contiguous, cat, copy_), each with
the Python line or the backward node that issued it.

With --host-ops N it lists, per step, the N ops and autograd nodes
(torch.profiler, CPU activity) of largest total host time, each with its
self host time and count (main thread and autograd thread together).

With --phases it only times each phase of the step on the host (the
edge_index clone, our Graph build, each layer's forward, ReLU, the loss,
backward, the optimizer step, zero_grad; time.perf_counter around each, no
synchronisation inside a step; median us of --steps steps after a warm-up),
ours and PyG's, and profiles nothing.
"""
import argparse
import collections
import cProfile
import io
import pstats
import statistics
import time
import traceback

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from pyg_ioaware import Graph
from pyg_ioaware.bench.cases import MINIBATCH_CASES, select
from pyg_ioaware.bench.minibatch import SIZES, LEARNING_RATE, TwoLayer, generate_batches, \
    train_step
from pyg_ioaware.bench.timing import autocast


def run_steps(model, optimizer, batches, steps, precision, new_graph=True):
    for i in range(steps):
        batch = batches[i % len(batches)]
        edge_index = batch.edge_index.clone() if new_graph else batch.edge_index
        train_step(model, optimizer, batch, edge_index, precision)


PHASES = ("clone", "graph", "conv1", "relu", "conv2", "loss", "backward", "step", "zero")


def phase_times(model, optimizer, batches, steps: int, precision: str, ours: bool,
                new_graph: bool = True) -> dict:
    """Median host us of each of PHASES over ``steps`` steps (a new graph
    every step, or with ``new_graph`` False each batch's own tensor: no
    clone, cached graphs), after as many warm-up steps; the Graph build is
    timed only for ``ours`` (PyG's layers build none: 0)."""
    times = {name: [] for name in PHASES + ("total",)}
    for i in range(2 * steps):
        batch = batches[i % len(batches)]
        torch.cuda.synchronize()
        marks = [time.perf_counter()]
        edge_index = batch.edge_index.clone() if new_graph else batch.edge_index
        marks.append(time.perf_counter())
        if ours:
            Graph.from_input(edge_index, batch.num_nodes)
        marks.append(time.perf_counter())
        with autocast(precision, batch.x.device):
            h = model.conv1(batch.x, edge_index)
            marks.append(time.perf_counter())
            h = h.relu()
            marks.append(time.perf_counter())
            out = model.conv2(h, edge_index)
            marks.append(time.perf_counter())
            loss = F.cross_entropy(out[:batch.num_seeds], batch.y)
        marks.append(time.perf_counter())
        loss.backward()
        marks.append(time.perf_counter())
        optimizer.step()
        marks.append(time.perf_counter())
        optimizer.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
        if i >= steps:
            for name, start, end in zip(PHASES, marks, marks[1:]):
                times[name].append((end - start) * 1e6)
            times["total"].append((marks[-1] - marks[0]) * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="gcn,sage-mean,gatv2,transformer")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rows", type=int, default=25, help="functions listed per profile")
    parser.add_argument("--kernels", type=int, default=0,
                        help="list this many CUDA ops per step by count, ours and PyG's")
    parser.add_argument("--same-graph", action="store_true",
                        help="reuse each batch's edge_index (cached graphs) instead of a clone")
    parser.add_argument("--copies", type=int, default=0,
                        help="list this many copy / cast ops per step (ours) by the line issuing them")
    parser.add_argument("--profile-pyg", action="store_true",
                        help="also list PyG's layers' profile (by default only ours)")
    parser.add_argument("--host-ops", type=int, default=0,
                        help="list this many ops / autograd nodes per step by host time")
    parser.add_argument("--phases", action="store_true",
                        help="only time each phase of a step on the host (no profiler)")
    args = parser.parse_args()

    size = SIZES[args.size]
    new_graph = not args.same_graph
    batches = generate_batches(size, device="cuda")
    if args.phases:
        print(f"host us a phase (median of {args.steps} steps), {args.size} batch, "
              f"{args.precision}, " + ("a new graph every step" if new_graph else
                                       "the same graphs (cached)"))
        print(f"{'case':34} {'impl':5} " + " ".join(f"{name:>8}" for name in PHASES + ("total",)))
        for case in select(args.cases, MINIBATCH_CASES):
            for impl, make in (("ours", case.make_ours), ("pyg", case.make_pyg)):
                torch.manual_seed(0)
                model = TwoLayer(make, size.channels).cuda()
                optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
                times = phase_times(model, optimizer, batches, args.steps, args.precision,
                                    impl == "ours", new_graph)
                print(f"{case.name:34} {impl:5} " + " ".join(f"{times[name]:8.1f}"
                                                           for name in PHASES + ("total",)))
        return
    variants = []
    for case in select(args.cases, MINIBATCH_CASES):
        for impl, make in (("ours", case.make_ours), ("pyg", case.make_pyg)):
            torch.manual_seed(0)
            model = TwoLayer(make, size.channels).cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
            run_steps(model, optimizer, batches, 2 * len(batches), args.precision, new_graph)
            variants.append((case, impl, model, optimizer))
    # Every wall time before any profiling: after a torch.profiler session
    # the process keeps CUDA activity tracing on, and the steps timed after
    # it ran 30-50% slower on an H200 host (the cProfile listings below come
    # after it too: read them as shares, not as times).
    wall_ms = {}
    for case, impl, model, optimizer in variants:
        torch.cuda.synchronize()
        start = time.perf_counter()
        run_steps(model, optimizer, batches, args.steps, args.precision, new_graph)
        torch.cuda.synchronize()
        wall_ms[case.name, impl] = (time.perf_counter() - start) * 1e3 / args.steps
    for case, impl, model, optimizer in variants:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run_steps(model, optimizer, batches, len(batches), args.precision, new_graph)
            torch.cuda.synchronize()
        kernels = sum(e.count for e in prof.key_averages()
                      if e.device_type == torch.autograd.DeviceType.CUDA)
        gpu_ms = sum(e.self_device_time_total for e in prof.key_averages()
                     if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3
        print(f"\n=== {case.name} {impl} {args.size} {args.precision}: "
              f"{wall_ms[case.name, impl]:.2f} ms/step wall, "
              f"{gpu_ms / len(batches):.2f} ms/step GPU busy, "
              f"{kernels / len(batches):.0f} CUDA ops/step")
        if args.kernels:
            ops = sorted((e for e in prof.key_averages()
                          if e.device_type == torch.autograd.DeviceType.CUDA),
                         key=lambda e: -e.count)
            for e in ops[:args.kernels]:
                print(f"  {e.count / len(batches):5.1f}/step "
                      f"{e.self_device_time_total / e.count:7.1f} us  {e.key[:100]}")
        if args.host_ops:
            list_host_ops(model, optimizer, batches, args.precision, new_graph, args.host_ops)
        if impl != "ours" and not args.profile_pyg:
            continue
        if args.copies:
            list_copies(model, optimizer, batches, args.precision, new_graph, args.copies)
        profiler = cProfile.Profile()
        profiler.enable()
        run_steps(model, optimizer, batches, args.steps, args.precision, new_graph)
        torch.cuda.synchronize()
        profiler.disable()
        for key in ("tottime", "cumulative"):
            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text).sort_stats(key)
            stats.print_stats(args.rows)
            print(f"--- by {key} (all {args.steps} steps)")
            print("\n".join(line for line in text.getvalue().splitlines()[6:] if line))


def list_host_ops(model, optimizer, batches, precision, new_graph, rows) -> None:
    """The ``rows`` ops and autograd nodes of largest total host time over
    ``len(batches)`` steps, per step: total and self us, count."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run_steps(model, optimizer, batches, len(batches), precision, new_graph)
        torch.cuda.synchronize()
    steps = len(batches)
    events = sorted(prof.key_averages(), key=lambda e: -e.cpu_time_total)
    print(f"--- host us per step: total, self, count (first {rows})")
    for e in events[:rows]:
        print(f"  {e.cpu_time_total / steps:8.1f} {e.self_cpu_time_total / steps:8.1f} "
              f"{e.count / steps:5.1f}  {e.key[:90]}")


COPY_OPS = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default,
            torch.ops.aten.clone.default, torch.ops.aten.cat.default}


class CopyCounter(TorchDispatchMode):
    """Counts the copy and cast ops that reach the dispatcher (autocast's
    casts, .to, .contiguous's clones, cat, copy_) by op and by where they
    came from: the innermost Python line outside torch, or in backward the
    autograd node running."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in COPY_OPS:
            node = torch._C._current_autograd_node()
            if node is not None:
                where = f"(backward of {node.name()})"
            else:
                frames = [f for f in traceback.extract_stack()[:-1] if "/torch/" not in f.filename]
                where = f"{frames[-1].filename.split('/src/')[-1]}:{frames[-1].lineno}" \
                    if frames else "(no Python line)"
            self.counts[func.__name__, where] += 1
        return func(*args, **(kwargs or {}))


def list_copies(model, optimizer, batches, precision, new_graph, rows) -> None:
    """The copy and cast ops of ``len(batches)`` steps, per step."""
    with CopyCounter() as counter:
        run_steps(model, optimizer, batches, len(batches), precision, new_graph)
    torch.cuda.synchronize()
    print(f"--- copy / cast ops per step (first {rows})")
    for (name, where), count in counter.counts.most_common(rows):
        print(f"  {count / len(batches):5.1f}/step  {name:18s} {where}")


if __name__ == "__main__":
    main()
