"""Where a layer's GPU time goes: torch.profiler over a few training steps
(forward, backward) of one of our layers on a suite graph, the CUDA
kernels of each phase listed by total time.

    python scripts/profile_layer.py --layer GATv2Conv --graph web-like --heads 2 --channels 64

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
    args = parser.parse_args()

    edge_index, num_nodes = generate(args.graph, device="cuda")
    edge_index = one_self_loop_per_node(edge_index, num_nodes, num_nodes)
    width = args.heads * args.channels
    layer = getattr(pyg_ioaware.nn, args.layer)(width, args.channels, heads=args.heads,
                                                add_self_loops=False).cuda()
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


if __name__ == "__main__":
    main()
