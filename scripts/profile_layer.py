"""Where a layer's GPU time goes: torch.profiler over a few training steps
(forward, backward) of one of our layers on a suite graph, the CUDA
kernels of each phase listed by total time.

    python scripts/profile_layer.py --layer GATv2Conv --graph web-like --heads 2 --channels 64

With --timeline it also lists the last step's kernels in GPU order with
their start, duration and the idle gap before each (where the GPU waited
for the host), and the step's busy share.

Run on a GPU host from a source checkout (PYTHONPATH=src); a diagnosis tool,
not a benchmark (docs/benchmark_protocol.md timings come from python -m pyg_ioaware.bench).
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import pyg_ioaware.nn
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


if __name__ == "__main__":
    main()
