"""Host microseconds per call of the pieces a new graph and an SpMM cost.

Each piece runs many times back to back on a small graph (so the GPU never
holds the host back) and the host time per call is reported: torch
reference points (an allocation, an elementwise kernel, a device-to-host
read), then our native entries and Python paths. A diagnosis tool for
launch-bound mini-batch steps; run on a GPU host from a source checkout
(PYTHONPATH=src).

    python scripts/host_costs.py
"""
import torch

from pyg_ioaware import Graph, _native
from pyg_ioaware.bench.minibatch import SIZES, generate_batches
from pyg_ioaware.ops import normalize
from pyg_ioaware.ops.spmm import spmm_trusted
from spmm_probe import host_us  # scripts/ is on sys.path when a script there runs


def main() -> None:
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    batch = generate_batches(SIZES["small"], device="cuda", count=1)[0]
    edge_index, n = batch.edge_index, batch.num_nodes
    graph = Graph.from_edge_index(edge_index, n)
    looped = graph.with_remaining_self_loops()
    values = normalize.normalized_values(looped, None, "gcn", torch.float32).values
    x = torch.randn(n, 64, device="cuda")
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
