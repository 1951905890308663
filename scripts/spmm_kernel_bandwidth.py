"""The SpMM kernels of our own alone, per graph, width and dtype: ms and
share of the device's copy bandwidth under the minimal bytes model (the
benchmark's: gathered rows once per entry, output rows once), for the
forward A X and the backward A^T G over the cached CSR^T. A lean twin of
the benchmark's kernel rows (no layer, no baseline), for trying kernel
changes on the large suite graphs in little device time.

    PYTHONPATH=src python scripts/spmm_kernel_bandwidth.py --graphs pokec-like,web-like
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
    args = parser.parse_args()
    device = torch.device("cuda")
    copy_gbs = copy_bandwidth_gbs(device)
    print(f"device: {torch.cuda.get_device_name()}, copy {copy_gbs:.0f} GB/s")
    print(f"{'graph':14s} {'D':>4s} {'dtype':5s} {'A X ms':>8s} {'share':>6s} "
          f"{'A^T G ms':>9s} {'share':>6s}")
    for name, graph, width, dtype_name, values, x, useful in suite_inputs(
            args.graphs.split(","), [int(w) for w in args.widths.split(",")],
            args.dtypes.split(","), device):
        t = graph.transpose
        cells = []
        for rowptr, col, vals in ((graph.rowptr, graph.col, values.values),
                                  (t.rowptr, t.col, values.values_t)):
            ms = time_back_to_back(lambda: run_with_backend(
                "pygio-csr", rowptr, col, vals, x, rowptr.numel() - 1, False), device)
            cells.append(f"{ms:8.3f} {share_of_copy(useful, ms, copy_gbs):6.0%}")
        print(f"{name:14s} {width:4d} {dtype_name:5s} {cells[0]} {' ' + cells[1]}", flush=True)


if __name__ == "__main__":
    main()
