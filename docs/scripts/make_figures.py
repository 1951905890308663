"""Figures of the design page, drawn with matplotlib on every docs build.

- ``design_dataflow.png``: what each kernel family reads and writes in
  memory, PyG's message passing against the fused kernels;
- ``design_traffic.png``: a simple memory-traffic model of one forward pass
  on the benchmark suite's graph sizes (a model, not a measurement);
- ``design_hubs.png``: the in-degree distribution of a skewed graph and the
  hub threshold the reduction and attention kernels split at.

    python docs/scripts/make_figures.py [--out DIR]
"""
from __future__ import annotations

import argparse
import pathlib

DOCS = pathlib.Path(__file__).resolve().parents[1]

# The benchmark suite's sizes (docs/benchmark_protocol.md).
SUITE = [("arxiv-like", 169_343, 1_166_243), ("roads-like", 142_000, 277_000),
         ("tolokers-like", 11_758, 1_038_000), ("pokec-like", 1_632_803, 30_622_564),
         ("web-like", 2_890_331, 12_895_369), ("products-like", 2_449_029, 61_859_140)]


def _box(ax, x, y, w, h, text, color):
    from matplotlib.patches import FancyBboxPatch
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", fc=color,
                                ec="black", lw=0.8))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=7.2)


def _arrow(ax, x0, y0, x1, y1):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops=dict(arrowstyle="->", lw=0.9, color="black"))


def dataflow(path: pathlib.Path) -> None:
    import matplotlib.pyplot as plt

    node, edge, kernel = "#cfe2f3", "#f4cccc", "#d9ead3"
    families = [
        ("SpMM family (GCNConv, sum/mean)",
         [("x [N,F]", node), ("x_j = x[src]\n[E,F]", edge), ("a_e * x_j\n[E,F]", edge),
          ("scatter-add\nout [N,F]", node)],
         [("x [N,F]", node), ("CSR SpMM: a warp per row,\ngather, sum in registers", kernel),
          ("out [N,F]\n(+ bias fused)", node)]),
        ("Reduction family (min/max, SAGEConv)",
         [("x [N,F]", node), ("x_j = x[src]\n[E,F]", edge),
          ("scatter_reduce\nout [N,F]", node), ("saved for bwd:\nx_j [E,F]", edge)],
         [("x [N,F]", node), ("degree-aware min/max:\nhubs split over SMs", kernel),
          ("out [N,F] +\nint32 arg [N,F]", node)]),
        ("Attention family (GATv2Conv, TransformerConv)",
         [("x [N,HC]", node), ("x_i, x_j\n[E,H,C] each", edge),
          ("scores, softmax\nalpha [E,H]", edge),
          ("alpha * x_j [E,H,C]\nscatter-add", edge)],
         [("x [N,HC]", node), ("one pass per row:\nscores, online softmax,\ndropout, weighted sum",
                               kernel), ("out [N,HC] +\nlse [N,H] fp32", node)]),
    ]
    fig, axes = plt.subplots(3, 1, figsize=(9.0, 7.2))
    for ax, (title, pyg, ours) in zip(axes, families):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 2.3)
        ax.axis("off")
        ax.set_title(title, fontsize=9, loc="left")
        ax.text(0.0, 1.62, "PyG", fontsize=7.5, fontweight="bold", va="center")
        ax.text(0.0, 0.42, "fused", fontsize=7.5, fontweight="bold", va="center")
        for row, items, y in ((0, pyg, 1.3), (1, ours, 0.1)):
            n = len(items)
            w = 7.8 / n - 0.35
            for i, (text, color) in enumerate(items):
                x = 1.0 + i * (w + 0.35)
                _box(ax, x, y, w, 0.66, text, color)
                if i:
                    _arrow(ax, x - 0.33, y + 0.33, x - 0.02, y + 0.33)
    from matplotlib.patches import Patch
    fig.legend(handles=[Patch(fc=node, ec="black", label="node-sized tensor in GPU memory"),
                        Patch(fc=edge, ec="black", label="edge-sized tensor in GPU memory"),
                        Patch(fc=kernel, ec="black", label="one fused kernel (on-chip)")],
               loc="lower center", ncol=3, fontsize=7.5, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def traffic(path: pathlib.Path) -> None:
    """Bytes of one fp32 forward pass at feature width 64, a simple model:
    PyG: gather (read E rows, write E), per-edge op (read E, write E), scatter
    (read E, write N); attention: two gathers, scores and the weighted
    messages (about 8 E rows). Fused: each gathered row once per edge and
    each output once (attention: two gathered rows per edge)."""
    import matplotlib.pyplot as plt
    import numpy as np

    width, elem = 64, 4
    row = width * elem
    models = [("SpMM / GCNConv", lambda n, e: 5 * e + n, lambda n, e: e + n),
              ("min/max", lambda n, e: 3 * e + n, lambda n, e: e + 2 * n),
              ("GATv2 attention", lambda n, e: 8 * e + n, lambda n, e: 2 * e + n)]
    names = [s[0] for s in SUITE]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), sharey=True)
    xs = np.arange(len(SUITE))
    for ax, (title, pyg, ours) in zip(axes, models):
        pyg_gb = [pyg(n, e) * row / 1e9 for _, n, e in SUITE]
        ours_gb = [ours(n, e) * row / 1e9 for _, n, e in SUITE]
        ax.bar(xs - 0.2, pyg_gb, 0.4, label="PyG (per-edge tensors)", color="#e06666")
        ax.bar(xs + 0.2, ours_gb, 0.4, label="fused (minimal bytes)", color="#6aa84f")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
    axes[0].set_ylabel("GB moved, one forward, D=64 fp32")
    axes[0].legend(fontsize=7)
    fig.suptitle("Memory traffic model (not a measurement): per-edge intermediates "
                 "multiply the bytes", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def hubs(path: pathlib.Path) -> None:
    """In-degrees of an R-MAT graph like the suite's web-like (skewed)."""
    import matplotlib.pyplot as plt
    import numpy as np

    rng = np.random.default_rng(0)
    scale, edges = 17, 600_000
    a, b = 0.65, 0.15  # R-MAT quadrant probabilities of web-like (c = b)
    dst = np.zeros(edges, dtype=np.int64)
    for _ in range(scale):  # R-MAT: pick a quadrant per bit (noisy, as generators do)
        r = rng.random(edges)
        lo = a + b + rng.uniform(-0.05, 0.05, edges)
        bit = r >= lo
        dst = dst * 2 + bit
    deg = np.bincount(dst, minlength=1 << scale)
    deg = deg[deg > 0]
    q = np.quantile(deg, 0.99)
    threshold = max(q, 256)
    order = np.sort(deg)[::-1]
    hub_rows = int((deg > threshold).sum())
    share = order[:hub_rows].sum() / order.sum()

    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    ax.loglog(np.arange(1, len(order) + 1), order, color="#3d85c6", lw=1.2)
    ax.axhline(threshold, color="#cc0000", ls="--", lw=1)
    ax.text(1.3, threshold * 1.5,
            f"hub threshold max(0.99 quantile, 256) = {threshold:.0f}:\n{hub_rows} rows "
            f"({100 * hub_rows / len(deg):.2f}% of rows) hold {100 * share:.0f}% of the edges",
            fontsize=7.5, color="#cc0000")
    ax.set_xlabel("destination rows, by in-degree (rank)")
    ax.set_ylabel("in-degree")
    ax.set_title("A skewed graph: one warp per row would leave a few warps with most "
                 "of the work;\nrows above the threshold are cut into 256-entry chunks "
                 "spread over all SMs", fontsize=8.5)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def generate(out_dir: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    dataflow(out_dir / "design_dataflow.png")
    traffic(out_dir / "design_traffic.png")
    hubs(out_dir / "design_hubs.png")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DOCS / "_generated")
    args = parser.parse_args(argv)
    generate(args.out)
    print(f"make_figures: wrote {args.out}")
    return 0


if __name__ == "__main__":
    main()
