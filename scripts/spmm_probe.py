"""Diagnostics for the SpMM family on a GPU, behind the choices in spmm_plan.

For each suite graph (GCN-normalized, self loops added), width and dtype it
times, GPU-bound (20 back-to-back calls between two CUDA events):
  * our SpMM with each cuSPARSE CSR algorithm pinned, and the one the tuner picks;
  * torch.sparse.mm on the same CSR matrix in the same dtype;
  * the backward product A^T G: over the materialized CSR^T (the default) and
    through cuSPARSE's transposed SpMM over A.
Then the host cost of one GCNConv forward on a tiny graph (ours, PyG's,
torch.sparse), where launch overhead is all there is.

    PYTHONPATH=src python scripts/spmm_probe.py [--graphs arxiv-like,...] [--out FILE.json]

``--preprocess ALG`` instead runs cuSPARSE's optional cusparseSpMM_preprocess
once for that algorithm on a small graph and checks the SpMM after it
(run it under compute-sanitizer; the library does not use preprocessing).
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch_geometric

from pyg_ioaware import Graph, _native, ops
from pyg_ioaware.bench.graphs import generate
from pyg_ioaware.nn import GCNConv
from pyg_ioaware.ops import spmm_plan
from pyg_ioaware.ops.spmm import spmm

REPEATS = 20


def gpu_ms(fn) -> float:
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPEATS):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / REPEATS


def host_us(fn, calls: int = 300) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def probe_graph(name: str, widths, dtypes) -> list[dict]:
    edge_index, n = generate(name, device="cuda")
    graph = Graph.from_input(edge_index, num_nodes=n).with_remaining_self_loops()
    rows = []
    for dtype in dtypes:
        values, values_t = ops.edge_values(graph, None, "gcn", dtype)
        adj = torch.sparse_csr_tensor(graph.rowptr.long(), graph.col.long(), values, (n, n))
        for width in widths:
            x = torch.randn(n, width, device="cuda", dtype=dtype)
            row = {"graph": name, "nodes": n, "nnz": graph.num_edges, "width": width,
                   "dtype": str(dtype).replace("torch.", "")}
            out = torch.empty(n, width, device="cuda", dtype=dtype)
            for alg, alg_name in spmm_plan.ALGORITHM_NAMES.items():
                for transpose in (False, True):
                    key = f"{alg_name}{'_T' if transpose else ''}"
                    plan = None
                    try:
                        plan = spmm_plan.SpmmPlan(graph.rowptr, graph.col, n, width, dtype,
                                                  transpose, alg)
                        plan.allocate_workspace(values, x, out)
                        row[key] = gpu_ms(lambda: plan.run(values, x, out))
                    except Exception as error:  # not supported: record why
                        row[key] = f"n/a ({str(error).splitlines()[0][:60]})"
            spmm_plan.PLANS.clear()
            row["ours"] = gpu_ms(lambda: spmm(graph.rowptr, graph.col, values, x, n, False))
            row["picked"] = next(iter(spmm_plan.PLANS.algorithms().values()), "none")
            row["ours_bwd_materialized"] = gpu_ms(
                lambda: spmm(graph.rowptr_t, graph.col_t, values_t, x, n, False))
            row["ours_bwd_transpose"] = gpu_ms(
                lambda: spmm(graph.rowptr, graph.col, values, x, n, True))
            try:
                row["torch.sparse"] = gpu_ms(lambda: torch.sparse.mm(adj, x))
                row["torch.sparse_bwd"] = gpu_ms(lambda: torch.sparse.mm(adj.t(), x))
            except RuntimeError as error:
                row["torch.sparse"] = f"n/a ({str(error).splitlines()[0][:60]})"
            rows.append(row)
            print(json.dumps(row), flush=True)
            del x, out
        del adj
    return rows


def probe_host_overhead() -> dict:
    n, width = 64, 16
    edge_index = torch.randint(0, n, (2, 256), device="cuda")
    x = torch.randn(n, width, device="cuda")
    ours = GCNConv(width, width).cuda()
    ref = torch_geometric.nn.GCNConv(width, width).cuda()
    graph = Graph.from_input(edge_index, num_nodes=n).with_remaining_self_loops()
    values, _ = ops.edge_values(graph, None, "gcn", torch.float32)
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


def check_preprocess(alg_name: str) -> None:
    """One preprocess + SpMM with ``alg_name`` against the plain-torch result."""
    by_name = {v: k for k, v in spmm_plan.ALGORITHM_NAMES.items()}
    edge_index, n = generate("arxiv-like", scale=0.001, device="cuda")
    graph = Graph.from_input(edge_index, num_nodes=n).with_remaining_self_loops()
    values, _ = ops.edge_values(graph, None, "gcn", torch.float32)
    x = torch.randn(n, 64, device="cuda")
    out = torch.empty_like(x)
    plan = spmm_plan.SpmmPlan(graph.rowptr, graph.col, n, 64, torch.float32, False,
                              by_name[alg_name])
    plan.allocate_workspace(values, x, out)
    _native.check(_native.library().pygio_spmm_preprocess(
        plan._handle, values.data_ptr(), x.data_ptr(), out.data_ptr(),
        _native.pointer(plan.workspace), _native.stream_of(x)))
    plan.run(values, x, out)
    torch.cuda.synchronize()
    ref = ops.spmm_op(graph.rowptr.cpu(), graph.col.cpu(), values.cpu(), x.cpu(), n, False)
    print(f"preprocess {alg_name}: max abs error {(out.cpu() - ref).abs().max().item():.2e}",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preprocess", default=None, metavar="ALG")
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
    print("\ngraph          width dtype     ours  picked    ALG1   ALG2   ALG3  torch.sp | "
          "bwd: mat  transp torch.sp")
    for r in results["spmm"]:
        def f(key):
            v = r.get(key)
            return f"{v:6.3f}" if isinstance(v, float) else "   n/a"
        print(f"{r['graph']:14s} {r['width']:5d} {r['dtype']:8s} {f('ours')} {r['picked']:8s} "
              f"{f('CSR_ALG1')} {f('CSR_ALG2')} {f('CSR_ALG3')} {f('torch.sparse')} | "
              f"{f('ours_bwd_materialized')} {f('ours_bwd_transpose')} {f('torch.sparse_bwd')}")


if __name__ == "__main__":
    main()
