"""How far a bench ratio moves between runs where host time bounds the
forward: the bench's layer timing repeated, each repeat timing ours, a
baseline and a second copy of that baseline in turns.

The second copy runs the same code as the baseline, so its ratio to the
baseline (A/A) shows how far the timing alone moves a ratio between two
equal implementations; ours against the baseline (A/B) is within the
noise where its spread over the repeats lies inside the A/A one.

    PYTHONPATH=src python scripts/forward_noise.py --cases gcn-d64 \\
        --graphs arxiv-like,roads-like,tolokers-like --dtypes fp32,bf16,fp16 --repeats 5
"""
import argparse
import statistics

import torch

from pyg_ioaware.bench.cases import CASES, OURS, Workload
from pyg_ioaware.bench.cli import LAYER_ROUNDS
from pyg_ioaware.bench.graphs import generate
from pyg_ioaware.bench.timing import LayerTimer, feature_dtype, free_memory, measure_interleaved

AGAIN = " again"


def repeat_forwards(case, work: Workload, baseline: str, iters: int, warmup: int,
                    repeats: int):
    """Forward ms of ours, the baseline and the baseline's second copy, one
    triple a repeat, each repeat timed as the bench times a case."""
    x = torch.randn(work.num_nodes, case.in_channels, device=work.device,
                    dtype=feature_dtype(work.precision)).requires_grad_()
    ours = case.make_ours(work)
    impls = {OURS: ours, baseline: case.baselines[baseline](work, ours),
             baseline + AGAIN: case.baselines[baseline](work, ours)}
    triples = []
    for _ in range(repeats):
        timers = {name: LayerTimer(impl.step, x, list(impl.module.parameters()), work.precision)
                  for name, impl in impls.items()}

        def failed(name, error):
            raise error

        results = measure_interleaved(timers, iters, warmup, LAYER_ROUNDS, failed)
        triples.append(tuple(results[name].fwd_ms for name in impls))
    free_memory(work.device)
    return triples


def spread(values) -> str:
    return (f"{min(values):.2f}x / {statistics.median(values):.2f}x / "
            f"{max(values):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="gcn-d64")
    parser.add_argument("--graphs", default="arxiv-like,roads-like,tolokers-like")
    parser.add_argument("--dtypes", default="fp32,bf16,fp16")
    parser.add_argument("--baseline", default="torch.sparse")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="graph size factor")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"device: {name}; forward ms, baseline's time over "
          f"ours (A/B) and over its copy's (A/A), min / median / max over the repeats")
    for graph_name in args.graphs.split(","):
        edge_index, num_nodes = generate(graph_name, args.scale, device=device)
        per_graph = {}
        for key in args.cases.split(","):
            case = CASES[key]
            for precision in args.dtypes.split(","):
                work = Workload(edge_index, num_nodes, precision, per_graph=per_graph)
                triples = repeat_forwards(case, work, args.baseline, args.iters, args.warmup,
                                          args.repeats)
                ab = [base / ours for ours, base, _ in triples]
                aa = [base / again for _, base, again in triples]
                ms = ", ".join(f"{o:.3f}/{b:.3f}/{a:.3f}" for o, b, a in triples)
                print(f"{graph_name:14s} {case.name:14s} {precision:5s} A/B {spread(ab)}  "
                      f"A/A {spread(aa)}  (ours/{args.baseline}/again ms: {ms})", flush=True)
        del edge_index, per_graph
        free_memory(device)


if __name__ == "__main__":
    main()
