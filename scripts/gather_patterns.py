"""How much of an SpMM kernel's share of copy bandwidth is its address
pattern: the same CSR rows (same row lengths, hubs and launch) with the
column indices replaced, timed by the same kernel (forward A X,
``pygio-csr``), so only where the gathered rows lie changes:

- ``graph``: the suite graph's own columns (random ids, heavy-tailed reuse);
- ``uniform``: uniform random columns (no reuse beyond chance);
- ``pairs`` / ``quads``: uniform random blocks of 2 / 4 adjacent rows, an
  entry's neighbours in CSR order taking the block's rows in turn, so the
  rows a warp gathers at once lie in 2 / 4 times larger runs of memory;
- ``stream``: column e is e mod N (every gather sequential).

Share: minimal bytes (gathered rows once per entry, output once) over time
over the measured copy bandwidth, as in spmm_kernel_bandwidth.py.

    PYTHONPATH=src python scripts/gather_patterns.py --graphs pokec-like --widths 64,128
"""
import argparse

import torch
from spmm_kernel_bandwidth import share_of_copy, suite_inputs

from pyg_ioaware.bench.bandwidth import copy_bandwidth_gbs, time_back_to_back
from pyg_ioaware.ops.spmm_backends import run_with_backend

PATTERNS = ("graph", "uniform", "pairs", "quads", "stream")


def blocked_columns(nnz: int, num_nodes: int, block: int, like: torch.Tensor) -> torch.Tensor:
    """Uniform random blocks of ``block`` adjacent ids, entry e taking row
    e mod block of its block."""
    e = torch.arange(nnz, device=like.device)
    first = torch.randint(num_nodes // block, (nnz,), device=like.device) * block
    return (first + e % block).to(like.dtype)


def patterns(col: torch.Tensor, num_nodes: int):
    nnz = col.numel()
    yield "graph", col
    yield "uniform", blocked_columns(nnz, num_nodes, 1, col)
    yield "pairs", blocked_columns(nnz, num_nodes, 2, col)
    yield "quads", blocked_columns(nnz, num_nodes, 4, col)
    yield "stream", (torch.arange(nnz, device=col.device) % num_nodes).to(col.dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="pokec-like,web-like,products-like")
    parser.add_argument("--widths", default="64,128")
    parser.add_argument("--dtypes", default="bf16,fp32")
    args = parser.parse_args()
    device = torch.device("cuda")
    copy_gbs = copy_bandwidth_gbs(device)
    print(f"device: {torch.cuda.get_device_name()}, copy {copy_gbs:.0f} GB/s")
    print(f"{'graph':14s} {'D':>4s} {'dtype':5s} {'row B':>5s} "
          + " ".join(f"{n:>15s}" for n in PATTERNS))
    for name, graph, width, dtype_name, values, x, useful in suite_inputs(
            args.graphs.split(","), [int(w) for w in args.widths.split(",")],
            args.dtypes.split(","), device):
        cells = []
        for _, col in patterns(graph.col, graph.num_src):
            ms = time_back_to_back(lambda: run_with_backend(
                "pygio-csr", graph.rowptr, col, values.values, x, graph.num_dst, False), device)
            cells.append(f"{ms:7.3f} ms {share_of_copy(useful, ms, copy_gbs):4.0%}")
        print(f"{name:14s} {width:4d} {dtype_name:5s} {width * x.element_size():5d} "
              + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
