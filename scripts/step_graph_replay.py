"""How fast a mini-batch training step runs once its host time is gone:
the bench's 2-layer model's step (forward, cross-entropy, backward, SGD)
on one batch, run eagerly and as a CUDA graph captured once and replayed,
for our layers and PyG's. A diagnosis tool: it bounds what taking the host
out of a step could give (the bench's steps cannot replay one graph as
they are: every batch has its own shapes and edge_index).

    python scripts/step_graph_replay.py --cases gcn-no-loops,sage-mean --sizes small,medium

Run on a GPU host from a source checkout (PYTHONPATH=src); fp32 only
(autocast's cast cache and graph capture do not mix).
"""
import argparse

import torch

from pyg_ioaware.bench.bandwidth import time_back_to_back
from pyg_ioaware.bench.cases import MINIBATCH_CASES, select
from pyg_ioaware.bench.minibatch import (SIZES, LEARNING_RATE, TwoLayer, generate_batches,
                                         train_step)


def step_times(make, channels: int, batch, name: str):
    """(eager ms, replayed ms; NaN where the step cannot be captured) of one
    model's training step on ``batch`` (its own edge_index every step: the
    graph cache hits), each timed back to back as the bench times kernels
    (bench.bandwidth.time_back_to_back); ``name`` labels a failed
    capture's message."""
    torch.manual_seed(0)
    model = TwoLayer(make, channels).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    def step():
        train_step(model, optimizer, batch, batch.edge_index, "fp32")

    side = torch.cuda.Stream()  # warm-up off the capturing stream, as torch's docs do
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(5):
            step()
    torch.cuda.current_stream().wait_stream(side)
    device = torch.device("cuda")
    eager = time_back_to_back(step, device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            step()
    except RuntimeError as error:  # a step that cannot be captured says why
        print(f"  {name}: capture failed: {str(error).splitlines()[0]}")
        return eager, float("nan")
    return eager, time_back_to_back(graph.replay, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="gcn-no-loops,sage-mean")
    parser.add_argument("--sizes", default="small,medium")
    args = parser.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'batch':7s} {'case':32s} {'ours eager':>10s} {'replayed':>9s} "
          f"{'PyG eager':>10s} {'replayed':>9s} {'PyG/ours eager':>15s} {'replayed':>9s}")
    for size_name in args.sizes.split(","):
        size = SIZES[size_name]
        batch = generate_batches(size, device="cuda")[0]
        for case in select(args.cases, MINIBATCH_CASES):
            label = f"{size_name} {case.name}"
            ours = step_times(case.make_ours, size.channels, batch, f"{label}, ours")
            pyg = step_times(case.make_pyg, size.channels, batch, f"{label}, PyG")
            print(f"{size_name:7s} {case.name:32s} {ours[0]:10.3f} {ours[1]:9.3f} "
                  f"{pyg[0]:10.3f} {pyg[1]:9.3f} {pyg[0] / ours[0]:14.2f}x "
                  f"{pyg[1] / ours[1]:8.2f}x", flush=True)


if __name__ == "__main__":
    main()
