"""Host microseconds per call of the pieces a new graph and an SpMM cost.

Each piece runs many times back to back on a small graph (so the GPU never
holds the host back) and the host time per call is reported: torch
reference points (an allocation, an elementwise kernel, a device-to-host
read), then our native entries and Python paths. With --projections:
GATv2Conv's fused projection, its pieces and the layer's call against
PyG's, each timed while a sleep kernel holds the GPU (so the host never
waits for it, whatever the size: --graph takes a suite graph); with
--launch-states also right after a sync of an idle GPU, after a sync that
waited for GPU work, and after the GPU idled 1 ms (where a launch costs the
host more). A diagnosis tool for launch-bound mini-batch steps; run on a
GPU host from a source checkout (PYTHONPATH=src).

    python scripts/host_costs.py [--layers | --projections [--graph arxiv-like] [--launch-states]]
"""
import argparse
import statistics
import time

import torch
import torch_geometric.nn as pyg_nn

from pyg_ioaware import Graph, _native, _native_host, nn as ours_nn
from pyg_ioaware.graph import prefetch
from pyg_ioaware.bench.cases.attention import one_self_loop_per_node
from pyg_ioaware.bench.graphs import generate
from pyg_ioaware.bench.minibatch import SIZES, generate_batches
from pyg_ioaware.ops import normalize
from pyg_ioaware.ops.spmm import spmm_trusted
from spmm_probe import host_us  # scripts/ is on sys.path when a script there runs


class Identity(torch.autograd.Function):
    """A Python autograd node doing nothing: what one such node costs."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return g


def layer_rows(edge_index, x) -> dict:
    """One layer's call and its pieces, on a graph the cache holds."""
    n, d = x.size(0), x.size(1)
    x_grad = x.clone().requires_grad_()
    grad = torch.randn(n, d, device=x.device)
    ours_gcn = ours_nn.GCNConv(d, d, add_self_loops=False).cuda()
    pyg_gcn = pyg_nn.GCNConv(d, d, add_self_loops=False).cuda()
    ours_sage = ours_nn.SAGEConv(d, d).cuda()
    pyg_sage = pyg_nn.SAGEConv(d, d).cuda()
    adjacency = ours_gcn._adjacency(edge_index, None, x, 0)
    h = ours_gcn.lin(x)
    h_grad = h.detach().clone().requires_grad_()

    def fwd_bwd(layer):
        return lambda: layer(x_grad, edge_index).backward(grad)

    rows = {}
    for name, layer in (("ours GCNConv no loops", ours_gcn), ("PyG GCNConv no loops", pyg_gcn),
                        ("ours SAGEConv", ours_sage), ("PyG SAGEConv", pyg_sage)):
        layer(x, edge_index)  # fills the cache
        rows[f"{name}: forward, no grad"] = torch.no_grad()(lambda l=layer: l(x, edge_index))
        rows[f"{name}: forward + backward"] = fwd_bwd(layer)
    # Reference points: the autograd engine's own cost per backward call.
    rows.update({
        "calibration: h.sum().backward()": lambda: h_grad.sum().backward(),
        "calibration: (h * 2).sum().backward()": lambda: (h_grad * 2).sum().backward(),
        "calibration: Python identity Function + sum + backward":
            lambda: Identity.apply(h_grad).sum().backward(),
        "propagate(h, no bias).sum() + backward":
            lambda: adjacency.propagate(h_grad).sum().backward(),
        "prefetch (cached graph)": lambda: prefetch(edge_index),
        "GCNConv._adjacency (cached)": lambda: ours_gcn._adjacency(edge_index, None, x, 0),
        "GCNConv.lin(x), no grad": torch.no_grad()(lambda: ours_gcn.lin(x)),
        "propagate, no grad": torch.no_grad()(lambda: adjacency.propagate(h, bias=ours_gcn.bias)),
        "propagate + backward": lambda: adjacency.propagate(h_grad, bias=ours_gcn.bias).backward(
            grad),
        "Graph.from_input (cached)": lambda: Graph.from_input(edge_index, n),
        "SAGEConv._aggregate, no grad": torch.no_grad()(
            lambda: ours_sage._aggregate((x, x), edge_index, n)),
        "SAGEConv._combine, no grad": torch.no_grad()(lambda: ours_sage._combine(x, x)),
    })
    return rows


def projection_rows(edge_index, n: int, rows: int) -> dict:
    """GATv2Conv(128, 64, heads=2)'s two projections as one product on
    ``rows`` nodes and its pieces (the C++ node, torch's ops it makes), and
    the layer's call on the graph (``n`` nodes)."""
    host = _native_host.active()
    d = 128
    x = torch.randn(n, d, device="cuda")
    x_grad = x.clone().requires_grad_()
    rows_x = x[:rows]
    ours, pyg = ours_nn.GATv2Conv(d, 64, heads=2).cuda(), pyg_nn.GATv2Conv(d, 64, heads=2).cuda()
    lins = (ours.lin_l, ours.lin_r)
    weights, biases = [lin.weight for lin in lins], [lin.bias for lin in lins]
    weight, bias = torch.cat(weights).detach(), torch.cat(biases).detach()
    rows_grad = rows_x.clone().requires_grad_()
    grad = torch.randn(rows_x.size(0), 2 * d, device=x.device)
    pieces = {
        "torch.cat(two weights)": lambda: torch.cat([w.detach() for w in weights]),
        "torch.cat(two biases)": lambda: torch.cat([b.detach() for b in biases]),
        f"torch.mm(x, W^T), {rows} rows": lambda: torch.mm(rows_x, weight.t()),
        f"torch.addmm(b, x, W^T), {rows} rows": lambda: torch.addmm(bias, rows_x, weight.t()),
        f"host.fused_linear, no grad, {rows} rows": torch.no_grad()(
            lambda: host.fused_linear(rows_x, weights, biases, dtype=None)),
        f"host.fused_linear (grad), {rows} rows": lambda: host.fused_linear(
            rows_grad, weights, biases, dtype=None),
        f"host.fused_linear (grad) + backward, {rows} rows": lambda: host.fused_linear(
            rows_grad, weights, biases, dtype=None).backward(grad),
    }
    for name, layer in (("ours", ours), ("PyG", pyg)):
        layer(x, edge_index)  # fills the cache
        pieces[f"{name} GATv2Conv: forward, no grad"] = torch.no_grad()(
            lambda l=layer: l(x, edge_index))
        pieces[f"{name} GATv2Conv: forward (grad)"] = lambda l=layer: l(x_grad, edge_index)
    return pieces


def host_us_busy(fn, calls: int = 20) -> float:
    """Host us per call of ``fn`` while a sleep kernel holds the GPU (its
    work waits behind the sleep: the host never waits for it)."""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(calls * 4_000_000)  # about 2 ms a call
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def spin(seconds: float) -> None:
    """Waits on the host without a CUDA call."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


#: How the GPU stands when a call starts (--launch-states): each prepares
#: one call; "queued" is host_us_busy's (work waits behind a sleep kernel).
LAUNCH_STATES = {
    "idle a moment (sync)": torch.cuda.synchronize,
    "after 1M cycles of GPU work (sync)": lambda: (torch.cuda._sleep(1_000_000),
                                                   torch.cuda.synchronize()),
    "idle 1 ms (sync, host spin)": lambda: (torch.cuda.synchronize(), spin(1e-3)),
}


def host_us_in_state(fn, prepare, calls: int = 40) -> float:
    """Median host us of one call of ``fn``, each call made right after
    ``prepare()`` (a LAUNCH_STATES entry)."""
    fn()
    times = []
    for _ in range(calls):
        prepare()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", action="store_true",
                        help="only the layers' calls and their pieces")
    parser.add_argument("--projections", action="store_true",
                        help="only GATv2Conv's calls and its projections' pieces")
    parser.add_argument("--graph", default=None,
                        help="with --projections: a suite graph (one self loop a node) "
                             "instead of the small mini-batch, its projections on every node")
    parser.add_argument("--launch-states", action="store_true",
                        help="with --projections: each piece's host us in each state "
                             "of the GPU at its start (LAUNCH_STATES), not only queued")
    args = parser.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if args.projections and args.graph is not None:
        edge_index, n = generate(args.graph, device="cuda")
        edge_index = one_self_loop_per_node(edge_index, n, n)
    else:
        batch = generate_batches(SIZES["small"], device="cuda", count=1)[0]
        edge_index, n = batch.edge_index, batch.num_nodes
    if args.projections:
        rows = projection_rows(edge_index, n, n if args.graph else 2048)
        if not args.launch_states:
            print(f"{args.graph or 'small batch'}: {n} nodes; host us a call, the GPU held busy")
            for name, fn in rows.items():
                print(f"{host_us_busy(fn):9.1f} us  {name}")
            return
        print(f"{args.graph or 'small batch'}: {n} nodes; host us a call (median), the GPU "
              f"at the call's start: " + " | ".join(["queued", *LAUNCH_STATES]))
        for name, fn in rows.items():
            times = [host_us_busy(fn)] + [host_us_in_state(fn, prepare)
                                          for prepare in LAUNCH_STATES.values()]
            print(" ".join(f"{t:7.1f}" for t in times) + f"  {name}")
        return
    x = torch.randn(n, 64, device="cuda")
    if args.layers:
        for name, fn in layer_rows(edge_index, x).items():
            print(f"{host_us(fn):9.1f} us  {name}")
        return
    graph = Graph.from_edge_index(edge_index, n)
    looped = graph.with_remaining_self_loops()
    values = normalize.normalized_values(looped, None, "gcn", torch.float32).values
    small = torch.zeros(8, device="cuda")
    x0, out0 = x[:, :0], torch.empty(n, 0, device="cuda")
    out64 = torch.empty_like(x)
    rows = {
        "ctypes: pygio_abi_version": _native.library().pygio_abi_version,
        "_native.spmm_csr, width 0 (no CUDA call)": lambda: _native.spmm_csr(
            looped.rowptr, looped.col, values, x0, None, out0, False, False),
        "_native.spmm_csr, width 64": lambda: _native.spmm_csr(
            looped.rowptr, looped.col, values, x, None, out64, False, False),
        "torch.empty(8) cuda": lambda: torch.empty(8, device="cuda"),
        "small.add_(1)": lambda: small.add_(1),
        "small.tolist() (sync)": lambda: small.tolist(),
        "edge_index.clone()": lambda: edge_index.clone(),
        "_native.edge_index_stats (sync)": lambda: _native.edge_index_stats(edge_index),
        "Graph.from_edge_index": lambda: Graph.from_edge_index(edge_index, n),
        "graph._build_self_loop_graph": lambda: graph._build_self_loop_graph(),
        "normalize._compute gcn": lambda: normalize._compute(looped, None, "gcn",
                                                               torch.float32),
        "spmm_trusted A x (64)": lambda: spmm_trusted(looped.rowptr, looped.col, values, x, n,
                                                      False),
        "spmm_trusted A^T x (64)": lambda: spmm_trusted(looped.rowptr, looped.col, values, x,
                                                        n, True),
        "graph._build_transpose": lambda: graph._build_transpose(),
        "torch.sort(int32 E)": lambda: torch.sort(graph.col, stable=True),
    }
    for name, fn in rows.items():
        print(f"{host_us(fn):9.1f} us  {name}")


if __name__ == "__main__":
    main()
