"""How far a host-bound mini-batch step is from its floor.

Times (host wall per step, many steps back to back, one synchronisation at
the end) the small mini-batch batch's 2-layer training step for

- ``pyg``: PyG's layer, a fresh edge_index every step;
- ``ours-new`` / ``ours-same``: ours, a fresh edge_index / the batch's own;
- ``floor-spmm``: the least Python an SpMM layer can cost: Linear, then one
  autograd.Function calling the native SpMM on a precomputed CSR (forward
  A X + b, backward A^T dY through the CSR^T; its values are not
  permuted to CSR^T order: a timing, not a result), nothing else per call;
- ``floor-dense``: the same model without the aggregation (Linear only),
  the part of the step no graph layer can remove;

then host microseconds of one layer's pieces. A diagnosis tool for the
launch-bound small batches; run on a GPU host from a source checkout
(PYTHONPATH=src):

    python scripts/step_floor.py --cases gcn-no-loops,sage-mean
"""
import argparse
import time

import torch
from torch import Tensor, nn

from pyg_ioaware import Graph, _native
from pyg_ioaware.bench.cases import MINIBATCH_CASES, select
from pyg_ioaware.bench.minibatch import (SIZES, LEARNING_RATE, TwoLayer, generate_batches,
                                         train_step)


class NativeSpmm(torch.autograd.Function):
    """Y = A X + b over (rowptr, col, values, largest row); dX = A^T dY over
    the CSR^T (rowptr_t, col_t, values_t, largest row)."""

    @staticmethod
    def forward(ctx, x, bias, a, a_t):
        ctx.a_t = a_t
        out = torch.empty(a[0].numel() - 1, x.size(1), dtype=x.dtype, device=x.device)
        _native.spmm_csr(*a[:3], x, bias, out, False, False, a[3])
        return out

    @staticmethod
    def backward(ctx, grad_out):
        grad_out = grad_out.contiguous()
        rowptr_t = ctx.a_t[0]
        grad_x = torch.empty(rowptr_t.numel() - 1, grad_out.size(1), dtype=grad_out.dtype,
                             device=grad_out.device)
        _native.spmm_csr(*ctx.a_t[:3], grad_out, None, grad_x, False, False, ctx.a_t[3])
        return grad_x, grad_out.sum(0), None, None


class FloorLayer(nn.Module):
    """Linear (no bias) then NativeSpmm with the bias, over fixed CSRs
    (``aggregate=False``: Linear with the bias only)."""

    def __init__(self, in_channels: int, out_channels: int, aggregate: bool):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=not aggregate)
        self.bias = nn.Parameter(torch.zeros(out_channels)) if aggregate else None
        self.csrs = None

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        out = self.lin(x)
        if self.bias is None:
            return out
        return NativeSpmm.apply(out, self.bias, *self.csrs)


def floor_csrs(edge_index: Tensor, num_nodes: int):
    graph = Graph.from_edge_index(edge_index, num_nodes)
    deg = torch.bincount(edge_index[1], minlength=num_nodes).float().clamp(min=1)
    values = torch.ones(graph.col.numel(), device=edge_index.device)
    rows = torch.repeat_interleave(torch.arange(num_nodes, device=edge_index.device),
                                   graph.rowptr.diff().long())
    values = values / deg[rows]
    graph_t = Graph.from_edge_index(edge_index.flip(0), num_nodes)
    bounds = [int(g.rowptr.diff().max()) for g in (graph, graph_t)]
    return ((graph.rowptr, graph.col, values, bounds[0]),
            (graph_t.rowptr, graph_t.col, values, bounds[1]))


def step_ms(model, batches, new_graph: bool, steps: int) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    def run(count):
        for i in range(count):
            batch = batches[i % len(batches)]
            if isinstance(model.conv1, FloorLayer):
                model.conv1.csrs = model.conv2.csrs = batch.csrs
            edge_index = batch.edge_index.clone() if new_graph else batch.edge_index
            train_step(model, optimizer, batch, edge_index, "fp32")

    run(2 * len(batches))
    torch.cuda.synchronize()
    start = time.perf_counter()
    run(steps)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="gcn-no-loops,sage-mean")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    size = SIZES[args.size]
    batches = generate_batches(size, device="cuda")
    for batch in batches:
        batch.csrs = floor_csrs(batch.edge_index, batch.num_nodes)
    variants = {
        "floor-dense": (lambda i, o: FloorLayer(i, o, False), False),
        "floor-spmm": (lambda i, o: FloorLayer(i, o, True), False),
    }
    for case in select(args.cases, MINIBATCH_CASES):
        variants[f"{case.key} pyg"] = (case.make_pyg, True)
        variants[f"{case.key} ours-new"] = (case.make_ours, True)
        variants[f"{case.key} ours-same"] = (case.make_ours, False)
    results = {name: [] for name in variants}
    for _ in range(args.repeats):  # rounds, so host drift weighs on all alike
        for name, (make, new_graph) in variants.items():
            torch.manual_seed(0)
            model = TwoLayer(make, size.channels).cuda()
            results[name].append(step_ms(model, batches, new_graph, args.steps))
    for name, times in results.items():
        print(f"{min(times):7.3f} ms/step (min of {args.repeats})  {name}")


if __name__ == "__main__":
    main()
