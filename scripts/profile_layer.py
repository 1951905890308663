"""Where a layer's GPU time goes: torch.profiler over a few training steps
(forward, backward) of one of our layers on a suite graph, the CUDA
kernels of each phase listed by total time.

    python scripts/profile_layer.py --layer GATv2Conv --graph web-like --heads 2 --channels 64

With --timeline it also lists the last step's kernels in GPU order with
their start, duration and the idle gap before each (where the GPU waited
for the host), and the step's busy share. With --host it times the forward
and the backward as the bench does (CUDA events, the GPU idle when the
call starts) and with the GPU held busy until the host has issued the whole
call (its GPU work alone), the host's time per call, when the forward
enters and leaves each C++ node of the host extension, one forward's host
ops and kernels in start order, and a cProfile of the forward.

Run on a GPU host from a source checkout (PYTHONPATH=src); a diagnosis tool,
not a benchmark (docs/benchmark_protocol.md timings come from python -m pyg_ioaware.bench).
"""
import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import pyg_ioaware.nn
from pyg_ioaware import _native_host
from pyg_ioaware.bench.cases.attention import one_self_loop_per_node
from pyg_ioaware.bench.graphs import generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", default="GATv2Conv")
    parser.add_argument("--graph", default="arxiv-like")
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=15, help="kernels listed per phase")
    parser.add_argument("--timeline", action="store_true",
                        help="list the last step's kernels in order, with idle gaps")
    parser.add_argument("--host", action="store_true",
                        help="time each phase with the GPU idle and busy at its start; "
                             "profile the forward's host time")
    args = parser.parse_args()

    edge_index, num_nodes = generate(args.graph, device="cuda")
    edge_index = one_self_loop_per_node(edge_index, num_nodes, num_nodes)
    width = args.heads * args.channels
    options = {"add_self_loops": False} if args.layer == "GATv2Conv" else {}  # loops added above
    layer = getattr(pyg_ioaware.nn, args.layer)(width, args.channels, heads=args.heads,
                                                **options).cuda()
    x = torch.randn(num_nodes, width, device="cuda", requires_grad=True)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32

    def step() -> None:
        with torch.autocast("cuda", dtype=dtype, enabled=args.dtype != "fp32"):
            with record_function("forward"):
                out = layer(x, edge_index)
        with record_function("backward"):
            out.backward(torch.ones_like(out))

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    print(f"{args.layer} ({args.heads}, {args.channels}) {args.dtype} on {args.graph}: "
          f"{num_nodes} nodes, {edge_index.size(1)} edges, {args.steps} steps")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows))
    if args.timeline:
        print_timeline(prof)
    if args.host:
        print_host_share(layer, x, edge_index, dtype, args.dtype != "fp32", args.rows)


def print_timeline(prof: profile) -> None:
    """The kernels of the last profiled step (from the last ``forward``
    annotation on the GPU; all steps where the profiler gave none), in
    start order: start and gap before each (us, from the step's first
    kernel), duration, name; then busy / span."""
    gpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    phases = [e for e in gpu if e.name in ("forward", "backward")]
    kernels = sorted((e for e in gpu if e.name not in ("forward", "backward")),
                     key=lambda e: e.time_range.start)
    forwards = [e.time_range.start for e in phases if e.name == "forward"]
    first = max(forwards) if forwards else kernels[0].time_range.start  # else: every step
    step = [k for k in kernels if k.time_range.start >= first]
    origin, previous_end, busy = step[0].time_range.start, step[0].time_range.start, 0.0
    print(f"{'start us':>9} {'gap us':>7} {'dur us':>7}  kernel (last step)")
    for k in step:
        start, end = k.time_range.start, k.time_range.end
        print(f"{start - origin:9.1f} {max(start - previous_end, 0.0):7.1f} "
              f"{end - start:7.1f}  {k.name[:90]}")
        busy += end - start
        previous_end = max(previous_end, end)
    span = previous_end - origin
    print(f"busy {busy:.1f} us of {span:.1f} us ({100 * busy / max(span, 1e-9):.0f}%)")


def print_host_share(layer, x, edge_index, dtype, autocast: bool, rows: int,
                     iters: int = 30) -> None:
    """Forward and backward ms with the GPU idle at the call's start (as
    the bench times them) and held busy by a sleep kernel until the host
    has issued the call (the GPU work alone), the host's ms per call, and
    the forward's cProfile (``rows`` functions by own time)."""
    def forward():
        with torch.autocast("cuda", dtype=dtype, enabled=autocast):
            return layer(x, edge_index)

    times = {key: [] for key in ("fwd idle", "fwd busy", "bwd idle", "bwd busy",
                                 "fwd host", "bwd host")}
    for _ in range(iters):
        for state in ("idle", "busy"):
            marks = []
            for phase in ("fwd", "bwd"):
                torch.cuda.synchronize()
                if state == "busy":
                    torch.cuda._sleep(20_000_000)  # ~10 ms: the host issues the call meanwhile
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)
                start.record()
                host = time.perf_counter()
                if phase == "fwd":
                    out = forward()
                else:
                    out.backward(torch.ones_like(out))
                    out = None
                host = time.perf_counter() - host
                end.record()
                marks.append((phase, start, end, host))
            torch.cuda.synchronize()
            x.grad = None
            for phase, start, end, host in marks:
                times[f"{phase} {state}"].append(start.elapsed_time(end))
                if state == "busy":
                    times[f"{phase} host"].append(host * 1e3)
    print("median ms: " + ", ".join(f"{key} {statistics.median(values):.3f}"
                                     for key, values in times.items()))
    print_node_marks(forward, iters)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function("idle forward"):
            forward()
        torch.cuda.synchronize()
    print_idle_forward(prof)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(iters):
        forward()
    profiler.disable()
    torch.cuda.synchronize()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(rows)
    print(stream.getvalue())


def print_node_marks(forward, iters: int) -> None:
    """Host us from a forward's start (the GPU idle) to where it enters and
    leaves each call of the host extension's linear and attention nodes,
    medians over ``iters`` forwards."""
    host = _native_host.active()
    if host is None:
        return
    marks, originals = [], {}
    for name in ("fused_linear", "gatv2_attention", "transformer_attention"):
        originals[name] = function = getattr(host, name)

        def marked(*args, _name=name, _function=function, **kwargs):
            marks.append((f"{_name} in", time.perf_counter()))
            out = _function(*args, **kwargs)
            marks.append((f"{_name} out", time.perf_counter()))
            return out
        setattr(host, name, marked)
    try:
        times = {}
        for _ in range(iters):
            torch.cuda.synchronize()
            marks.clear()
            start = time.perf_counter()
            forward()
            marks.append(("return", time.perf_counter()))
            for name, t in marks:
                times.setdefault(name, []).append((t - start) * 1e6)
    finally:
        for name, function in originals.items():
            setattr(host, name, function)
    print("host us from the forward's start (GPU idle): " + ", ".join(
        f"{name} {statistics.median(values):.0f}" for name, values in times.items()))


def print_idle_forward(prof: profile) -> None:
    """A forward called with the GPU idle: its host ops, kernel launches
    and kernels in start order, us from the call's start."""
    events = prof.events()
    origin = min(e.time_range.start for e in events if e.name == "idle forward")
    print(f"{'start us':>9} {'dur us':>7}  {'where':<4} event (a forward called with the GPU idle)")
    for e in sorted(events, key=lambda e: e.time_range.start):
        gpu = e.device_type == torch.autograd.DeviceType.CUDA
        if e.name == "idle forward" or not (gpu or e.name.startswith(("aten::", "cuda", "cu"))):
            continue
        print(f"{e.time_range.start - origin:9.1f} {e.time_range.end - e.time_range.start:7.1f}"
              f"  {'GPU' if gpu else 'host':<4} {e.name[:80]}")


if __name__ == "__main__":
    main()
