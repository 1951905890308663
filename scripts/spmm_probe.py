"""Diagnostics for the SpMM family on a GPU, behind the choices in ops.spmm_backends.

For each suite graph (GCN-normalized, self loops added), width and dtype it
times, GPU-bound (20 back-to-back calls between two CUDA events):
  * every registered SpMM backend (each cuSPARSE CSR algorithm, plain torch)
    on Y = A X and, where it supports it, on Y = A^T X over A's CSR;
  * the backend the tuner picks, and ops.spmm_csr as a whole;
  * torch.sparse.mm on the same CSR matrix in the same dtype;
  * the backward product A^T G: over the materialized CSR^T (the default) and
    through cuSPARSE's transposed SpMM over A.
Then the host cost of one GCNConv forward on a tiny graph (ours, PyG's,
torch.sparse), where launch overhead is all there is.

    PYTHONPATH=src python scripts/spmm_probe.py [--graphs arxiv-like,...] [--out FILE.json]

``--preprocess BACKEND`` (a cuSPARSE backend, e.g. cusparse-alg3) instead
runs cuSPARSE's optional cusparseSpMM_preprocess once with that algorithm on
a small graph and checks the SpMM after it (run it under compute-sanitizer;
the package does not use preprocessing).
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch_geometric

from pyg_ioaware import Graph, _native, ops
from pyg_ioaware.graph import structure_state
from pyg_ioaware.bench.graphs import generate
from pyg_ioaware.nn import GCNConv
from pyg_ioaware.ops import tuning
from pyg_ioaware.ops.spmm_backends import FAMILY, SpmmCall

REPEATS = 20


def gpu_ms(fn) -> float:
    return tuning.time_cuda_ms(fn, torch.device("cuda", torch.cuda.current_device()), REPEATS)


def host_us(fn, calls: int = 300) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def not_available(error: Exception) -> str:
    return f"n/a ({str(error).splitlines()[0][:60]})"


def time_backends(call: SpmmCall, shape: tuning.ShapeClass) -> dict:
    """ms of every registered SpMM backend that supports ``shape`` on ``call``."""
    timings = {}
    for backend in tuning.backends(FAMILY):
        if backend.supports(shape):
            try:
                timings[backend.name] = gpu_ms(lambda: backend.run(call))
            except Exception as error:  # not supported for this call: record why
                timings[backend.name] = not_available(error)
    return timings


def probe_graph(name: str, widths, dtypes) -> list[dict]:
    edge_index, n = generate(name, device="cuda")
    graph = Graph.from_input(edge_index, num_nodes=n).with_remaining_self_loops()
    rowptr, col, transpose = graph.rowptr, graph.col, graph.transpose
    rows = []
    for dtype in dtypes:
        edge_values = ops.normalized_values(graph, None, "gcn", dtype)
        values, values_t = edge_values.values, edge_values.values_t
        adj = torch.sparse_csr_tensor(rowptr.long(), col.long(), values, (n, n))
        for width in widths:
            x = torch.randn(n, width, device="cuda", dtype=dtype)
            row = {"graph": name, "nodes": n, "nnz": graph.num_edges, "width": width,
                   "dtype": str(dtype).replace("torch.", "")}
            for direction, is_transposed in (("forward", False), ("transposed", True)):
                call = SpmmCall(rowptr, col, values, x, n, is_transposed,
                                state=structure_state(rowptr))
                shape = tuning.shape_class(FAMILY, direction, width, dtype, x.device,
                                           graph.num_edges, n)
                row[direction] = time_backends(call, shape)
                row[f"picked_{direction}"] = tuning.choose(
                    shape, lambda b: tuning.time_cuda_ms(lambda: b.run(call), x.device)).name
            row["ours"] = gpu_ms(lambda: ops.spmm_csr(rowptr, col, values, x, n, False))
            row["ours_bwd_materialized"] = gpu_ms(
                lambda: ops.spmm_csr(transpose.rowptr, transpose.col, values_t, x, n, False))
            row["ours_bwd_transpose"] = gpu_ms(
                lambda: ops.spmm_csr(rowptr, col, values, x, n, True))
            try:
                row["torch.sparse"] = gpu_ms(lambda: torch.sparse.mm(adj, x))
                row["torch.sparse_bwd"] = gpu_ms(lambda: torch.sparse.mm(adj.t(), x))
            except RuntimeError as error:
                row["torch.sparse"] = not_available(error)
            rows.append(row)
            print(json.dumps(row), flush=True)
            del x
        del adj
    return rows


def probe_host_overhead() -> dict:
    n, width = 64, 16
    edge_index = torch.randint(0, n, (2, 256), device="cuda")
    x = torch.randn(n, width, device="cuda")
    ours = GCNConv(width, width).cuda()
    ref = torch_geometric.nn.GCNConv(width, width).cuda()
    graph = Graph.from_input(edge_index, num_nodes=n).with_remaining_self_loops()
    values = ops.normalized_values(graph, None, "gcn", torch.float32).values
    adj = torch.sparse_csr_tensor(graph.rowptr.long(), graph.col.long(), values, (n, n))
    weight = ours.lin.weight
    result = {
        "ours_fwd_us": host_us(lambda: ours(x, edge_index)),
        "pyg_fwd_us": host_us(lambda: ref(x, edge_index)),
        "torch.sparse_fwd_us": host_us(lambda: torch.sparse.mm(adj, x @ weight.t()) + ours.bias),
        "linear_us": host_us(lambda: x @ weight.t()),
    }
    print(json.dumps(result), flush=True)
    return result


def check_preprocess(backend_name: str) -> None:
    """One preprocess + SpMM with the algorithm of cuSPARSE backend
    ``backend_name`` against the plain-torch result."""
    algorithms = {b.name: b.algorithm for b in tuning.backends(FAMILY) if hasattr(b, "algorithm")}
    if backend_name not in algorithms:
        raise SystemExit(f"--preprocess takes one of {sorted(algorithms)}, got {backend_name!r}")
    edge_index, n = generate("arxiv-like", scale=0.001, device="cuda")
    graph = Graph.from_input(edge_index, num_nodes=n).with_remaining_self_loops()
    values = ops.normalized_values(graph, None, "gcn", torch.float32).values
    x = torch.randn(n, 64, device="cuda")
    out = torch.empty_like(x)
    _native.load_cusparse()
    handle = _native.spmm_plan_create(graph.rowptr, graph.col, n, 64, torch.float32, False,
                                      algorithms[backend_name])
    try:
        size = _native.spmm_workspace_size(handle, values, x, out)
        workspace = torch.empty(size, dtype=torch.uint8, device="cuda") if size else None
        _native.spmm_preprocess(handle, values, x, out, workspace)
        _native.spmm_run(handle, values, x, out, workspace)
        torch.cuda.synchronize()
    finally:
        _native.spmm_plan_destroy(handle)
    ref = ops.spmm_csr(graph.rowptr.cpu(), graph.col.cpu(), values.cpu(), x.cpu(), n, False)
    print(f"preprocess {backend_name}: max abs error {(out.cpu() - ref).abs().max().item():.2e}",
          flush=True)


def profile_host(calls: int = 500) -> None:
    """cProfile of our GCNConv forward on a tiny graph: where the host time goes."""
    import cProfile
    import pstats
    n, width = 64, 16
    edge_index = torch.randint(0, n, (2, 256), device="cuda")
    x = torch.randn(n, width, device="cuda", requires_grad=True)
    conv = GCNConv(width, width).cuda()
    for _ in range(20):
        conv(x, edge_index)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        conv(x, edge_index)
    profiler.disable()
    torch.cuda.synchronize()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(18)


def print_summary(rows: list[dict]) -> None:
    """One line per graph, width and dtype: ms of ours, of each backend
    (forward), of torch.sparse, and of the backward variants."""
    def ms(value, width: int = 8) -> str:
        return f"{value:{width}.3f}" if isinstance(value, float) else f"{'n/a':>{width}s}"
    backends = [b.name for b in tuning.backends(FAMILY)]
    print("\ngraph          width dtype        ours picked         " +
          "".join(f" {name:>13s}" for name in backends) +
          " torch.sp | bwd: mat   transp torch.sp")
    for r in rows:
        forward = r["forward"]
        print(f"{r['graph']:14s} {r['width']:5d} {r['dtype']:8s} {ms(r['ours'])} "
              f"{r['picked_forward']:14s}" +
              "".join(f" {ms(forward.get(name), 13)}" for name in backends) +
              f" {ms(r.get('torch.sparse'))} | {ms(r['ours_bwd_materialized'])} "
              f"{ms(r['ours_bwd_transpose'])} {ms(r.get('torch.sparse_bwd'))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preprocess", default=None, metavar="BACKEND")
    parser.add_argument("--host-profile", action="store_true",
                        help="profile the host side of a tiny GCNConv forward and exit")
    parser.add_argument("--graphs", default="arxiv-like,roads-like,tolokers-like")
    parser.add_argument("--widths", default="64,512")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.preprocess:
        return check_preprocess(args.preprocess)
    if args.host_profile:
        return profile_host()
    widths = [int(w) for w in args.widths.split(",")]
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    print(f"device: {torch.cuda.get_device_name()}", flush=True)
    results = {"host": probe_host_overhead(), "spmm": []}
    for name in args.graphs.split(","):
        results["spmm"] += probe_graph(name, widths, dtypes)
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    print_summary(results["spmm"])


if __name__ == "__main__":
    main()
