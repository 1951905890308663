"""What a new graph costs in a mini-batch training step, and where it goes.

For each batch size and layer of the bench's mini-batch cases, times the
2-layer model's training step (median of CUDA-event step times, and wall
time per step over the whole run) for

- ``pyg``: PyG's layers, a fresh edge_index every step;
- ``same``: ours, the same edge_index tensors every step (cached graphs);
- ``new-<mode>``: ours, a fresh edge_index every step, with SpMM's backward
  in each ``config.spmm_backward`` mode;

then, for ours on a new graph, the host time per step spent in each phase
(Graph build and its one read-back, self-loop graph, edge values, SpMM
forward and backward, the projections) and the GPU kernels of one step
(torch.profiler), against the same-graph step.

    python scripts/profile_new_graph.py --sizes small,large --cases gcn,gcn-no-loops

Run on a GPU host from a source checkout (PYTHONPATH=src); a diagnosis tool,
not the benchmark (python -m pyg_ioaware.bench times the cases).
"""
import argparse
import collections
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from pyg_ioaware import config, graph as graph_module, _native
from pyg_ioaware.bench.cases import MINIBATCH_CASES, select
from pyg_ioaware.bench.minibatch import (SIZES, LEARNING_RATE, TwoLayer, generate_batches,
                                         time_training, train_step)
from pyg_ioaware.nn import gcn_conv
from pyg_ioaware.ops import normalize, spmm, spmm_functional

PHASE_TIMES = collections.defaultdict(float)


def timed(name, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASE_TIMES[name] += time.perf_counter() - start
    return wrapper


def instrument() -> None:
    """Host timers around each phase a new graph may cost (nested phases
    count in their parents too)."""
    graph_cls = graph_module.Graph
    graph_cls.from_input = classmethod(timed("Graph.from_input", graph_cls.from_input.__func__))
    _native.edge_index_stats = timed("  index stats + read-back", _native.edge_index_stats)
    in_flight = graph_module._StatsInFlight
    in_flight.read = timed("  index stats read (prefetched)", in_flight.read)
    _native.csr_from_grouped = timed("  csr_from_grouped", _native.csr_from_grouped)
    _native.grouped_graph = timed("  grouped graph: launch, read (+ self loops)",
                                  _native.grouped_graph)
    _native.start_edge_index_stats = timed("    stats launch (EdgeStatsRead)",
                                           _native.start_edge_index_stats)
    graph_cls.__init__ = timed("  Graph.__init__", graph_cls.__init__)
    graph_cls.from_edge_index = classmethod(timed("  Graph.from_edge_index",
                                                  graph_cls.from_edge_index.__func__))
    graph_cls._build = classmethod(timed("    Graph._build", graph_cls._build.__func__))
    graph_cls.with_remaining_self_loops = timed("self-loop graph",
                                                graph_cls.with_remaining_self_loops)
    _native.csr_add_self_loops = timed("  csr_add_self_loops", _native.csr_add_self_loops)
    spmm_functional.normalized_values = timed("edge values", normalize.normalized_values)
    _native.gcn_norm = timed("  gcn_norm", _native.gcn_norm)
    _native.mean_norm = timed("  mean_norm", _native.mean_norm)
    gcn_conv.gcn_adjacency = timed("gcn_adjacency (all graph work)", gcn_conv.gcn_adjacency)
    fn = spmm.SpmmFunction
    fn.forward = staticmethod(timed("SpmmFunction.forward", fn.forward))
    fn.backward = staticmethod(timed("SpmmFunction.backward", fn.backward))
    spmm.LazyTranspose.for_backward = timed("  LazyTranspose", spmm.LazyTranspose.for_backward)
    from torch_geometric.nn.dense.linear import Linear
    Linear.forward = timed("Linear.forward", Linear.forward)


def run_steps(model, optimizer, batches, steps, precision, new_graph):
    for i in range(steps):
        batch = batches[i % len(batches)]
        edge_index = batch.edge_index.clone() if new_graph else batch.edge_index
        train_step(model, optimizer, batch, edge_index, precision)


def wall_ms(model, batches, precision, new_graph, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    run_steps(model, optimizer, batches, len(batches), precision, new_graph)
    torch.cuda.synchronize()
    start = time.perf_counter()
    run_steps(model, optimizer, batches, steps, precision, new_graph)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def kernels(model, batches, precision, new_graph, top):
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    run_steps(model, optimizer, batches, len(batches), precision, new_graph)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run_steps(model, optimizer, batches, len(batches), precision, new_graph)
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    steps = len(batches)
    total = sum(e.self_device_time_total for e in rows) / 1e3 / steps
    count = sum(e.count for e in rows) / steps
    rows.sort(key=lambda e: -e.self_device_time_total)
    lines = [f"      {e.self_device_time_total / 1e3 / steps:7.3f} ms  x{e.count / steps:4.1f}  "
             f"{e.key[:90]}" for e in rows[:top]]
    return total, count, lines


def trace(model, batches, precision, new_graph, path, steps=4):
    """Writes a chrome trace (host ops and kernels) of ``steps`` steps, after
    one warm pass over the batches."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    run_steps(model, optimizer, batches, len(batches), precision, new_graph)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_steps(model, optimizer, batches, steps, precision, new_graph)
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="gcn,gcn-no-loops")
    parser.add_argument("--sizes", default="small,medium,large")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=16)
    parser.add_argument("--top", type=int, default=12, help="kernels listed per profile")
    parser.add_argument("--trace", default=None,
                        help="folder for chrome traces (CPU and CUDA) of a few new-graph and "
                             "same-graph steps of ours")
    args = parser.parse_args()

    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    instrument()
    summary = []
    for size_name in args.sizes.split(","):
        size = SIZES[size_name]
        batches = generate_batches(size, device="cuda")
        for case in select(args.cases, MINIBATCH_CASES):
            for precision in args.precisions.split(","):
                torch.manual_seed(0)
                state = TwoLayer(case.make_ours, size.channels).state_dict()
                label = f"{size_name} {case.name} {precision}"
                results = {}
                variants = [("pyg", case.make_pyg, True, "auto"),
                            ("same", case.make_ours, False, "auto")]
                variants += [(f"new-{mode}", case.make_ours, True, mode)
                             for mode in config.SPMM_BACKWARD_MODES]
                for name, make, new_graph, mode in variants:
                    config.spmm_backward = mode
                    model = TwoLayer(make, size.channels).cuda()
                    model.load_state_dict(state)
                    event = time_training(model, batches, precision, new_graph, args.iters,
                                          args.warmup)
                    wall = wall_ms(model, batches, precision, new_graph, args.iters)
                    results[name] = (event, wall)
                    graph_module.clear_graph_cache()
                config.spmm_backward = "auto"
                print(f"\n=== {label}: step ms (event median / wall mean)")
                for name, (event, wall) in results.items():
                    print(f"   {name:18s} {event:8.3f} {wall:8.3f}")
                summary.append((label, results))

                model = TwoLayer(case.make_ours, size.channels).cuda()
                model.load_state_dict(state)
                optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
                for new_graph in (True, False):
                    run_steps(model, optimizer, batches, len(batches), precision, new_graph)
                    torch.cuda.synchronize()
                    PHASE_TIMES.clear()
                    run_steps(model, optimizer, batches, args.iters, precision, new_graph)
                    torch.cuda.synchronize()
                    print(f"   host us per step, {'new' if new_graph else 'same'} graph:")
                    for phase, seconds in PHASE_TIMES.items():
                        print(f"      {seconds * 1e6 / args.iters:8.1f}  {phase}")
                if args.trace:
                    for new_graph in (True, False):
                        name = f"{size_name}-{case.key}-{precision}-{'new' if new_graph else 'same'}"
                        trace(model, batches, precision, new_graph, f"{args.trace}/{name}.json")
                for new_graph in (True, False):
                    total, count, lines = kernels(model, batches, precision, new_graph,
                                                  args.top)
                    print(f"   GPU per step, {'new' if new_graph else 'same'} graph: "
                          f"{total:.3f} ms busy, {count:.0f} kernels")
                    print("\n".join(lines))
                graph_module.clear_graph_cache()
        del batches
        torch.cuda.empty_cache()

    print("\n=== summary: step ms (event median); ratios PyG/ours and new/same")
    names = ["pyg", "same"] + [f"new-{m}" for m in config.SPMM_BACKWARD_MODES]
    print(f"{'case':40s} " + " ".join(f"{n:>16s}" for n in names))
    for label, results in summary:
        cells = " ".join(f"{results[n][0]:16.3f}" for n in names)
        print(f"{label:40s} {cells}")


if __name__ == "__main__":
    main()
