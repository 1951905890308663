"""The SpMM kernels of our own alone, per graph, width and dtype: ms and
share of the device's copy bandwidth under the minimal bytes model (the
benchmark's: gathered rows once per entry, output rows once), for the
forward A X and the backward A^T G over the cached CSR^T. A lean twin of
the benchmark's kernel rows (no layer, no baseline), for trying kernel
changes on the large suite graphs in little device time. ``--backends``
adds columns for other SpMM backends on the same inputs (cuSPARSE's
``cusparse-alg2``: the choice spmm_backends.preference makes between them).

    PYTHONPATH=src python scripts/spmm_kernel_bandwidth.py --graphs pokec-like,web-like
    PYTHONPATH=src python scripts/spmm_kernel_bandwidth.py --graphs tolokers-like \
        --widths 128,256,512 --dtypes fp32 --backends pygio-csr,cusparse-alg2
"""
import argparse

import torch

from pyg_ioaware import Graph, ops
from pyg_ioaware.bench.bandwidth import copy_bandwidth_gbs, time_back_to_back
from pyg_ioaware.bench.cases.spmm import minimal_bytes
from pyg_ioaware.bench.graphs import generate
from pyg_ioaware.ops.spmm_backends import run_with_backend

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def suite_inputs(graph_names, widths, dtype_names, device):
    """For every suite graph (self loops added as GCNConv adds them), width
    and dtype: (graph name, Graph, width, dtype name, its GCN-normalized
    values, features x [N, width], the minimal bytes of A X). Each graph is
    dropped before the next is generated."""
    for name in graph_names:
        edge_index, num_nodes = generate(name, device=device)
        graph = Graph.from_edge_index(edge_index, num_nodes).with_remaining_self_loops()
        del edge_index
        for width in widths:
            for dtype_name in dtype_names:
                dtype = DTYPES[dtype_name]
                values = ops.normalized_values(graph, None, "gcn", dtype)
                x = torch.randn(num_nodes, width, device=device, dtype=dtype)
                yield (name, graph, width, dtype_name, values, x,
                       minimal_bytes(graph.num_edges, num_nodes, width, x.element_size()))
                del x, values
        del graph
        torch.cuda.empty_cache()


def share_of_copy(useful_bytes: int, ms: float, copy_gbs: float) -> float:
    """Useful bytes per second over the measured copy bandwidth."""
    return useful_bytes / (ms * 1e-3) / 1e9 / copy_gbs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="pokec-like,web-like,products-like")
    parser.add_argument("--widths", default="64,512")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--backends", default="pygio-csr",
                        help="comma-separated SpMM backends, a pair of columns each")
    args = parser.parse_args()
    backends = args.backends.split(",")
    device = torch.device("cuda")
    copy_gbs = copy_bandwidth_gbs(device)
    print(f"device: {torch.cuda.get_device_name()}, copy {copy_gbs:.0f} GB/s")
    header = "".join(f" {b + ' A X ms':>24s} {'share':>6s} {'A^T G ms':>9s} {'share':>6s}"
                     for b in backends)
    print(f"{'graph':14s} {'D':>4s} {'dtype':5s}{header}")
    for name, graph, width, dtype_name, values, x, useful in suite_inputs(
            args.graphs.split(","), [int(w) for w in args.widths.split(",")],
            args.dtypes.split(","), device):
        t = graph.transpose
        cells = []
        for backend in backends:
            for rowptr, col, vals, pad in ((graph.rowptr, graph.col, values.values, 24),
                                           (t.rowptr, t.col, values.values_t, 9)):
                ms = time_back_to_back(lambda: run_with_backend(
                    backend, rowptr, col, vals, x, rowptr.numel() - 1, False), device)
                cells.append(f"{ms:{pad}.3f} {share_of_copy(useful, ms, copy_gbs):6.0%}")
        print(f"{name:14s} {width:4d} {dtype_name:5s} {' '.join(cells)}", flush=True)


if __name__ == "__main__":
    main()
