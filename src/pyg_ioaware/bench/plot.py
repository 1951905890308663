"""The benchmark plot (PNG): per layer case and precision, ours' speedup and
memory ratio against each baseline per graph; then, when mini-batch cases
ran, the training-step ratios per batch size. All ratios on a log axis, 1x
marked, each bar labelled with its value; a value that could not be
computed is labelled with why (OOM, unsupported, n/a on CPU)."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

from .report import Row, comparisons

# One bar series: (label, value per group, status per group).
Series = Tuple[str, List[Optional[float]], List[str]]


def plot(rows: Sequence[Row], path: str, minibatch: Sequence[Row] = ()) -> str:
    """Draw ``rows`` (layer results) and ``minibatch`` (mini-batch
    comparisons) into ``path``. Returns a line saying what was done."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    comps = comparisons(rows)
    panels = list(dict.fromkeys((c["case"], c["precision"]) for c in comps))
    if not panels and not minibatch:
        return "nothing to plot"
    num_rows = len(panels) + (1 if minibatch else 0)
    fig, axes = plt.subplots(num_rows, 2, figsize=(13, 3.4 * num_rows), squeeze=False)
    for (case, precision), (ax_speed, ax_mem) in zip(panels, axes):
        mine = [c for c in comps if (c["case"], c["precision"]) == (case, precision)]
        graphs = list(dict.fromkeys(c["graph"] for c in mine))
        baselines = list(dict.fromkeys(c["baseline"] for c in mine))
        lookup = {(c["graph"], c["baseline"]): c for c in mine}
        _bars(ax_speed, graphs, [_series(f"vs {b} {key.split('_')[0]}", graphs, lookup, b, key)
                                 for b in baselines for key in ("fwd_speedup", "bwd_speedup")])
        _bars(ax_mem, graphs, [_series(f"vs {b} mem", graphs, lookup, b, "mem_ratio")
                               for b in baselines])
        ax_speed.set_title(f"{case} {precision}: speedup of ours")
        ax_mem.set_title(f"{case} {precision}: memory ratio (baseline / ours)")
    if minibatch:
        ax_speed, ax_new = axes[-1]
        batches = list(dict.fromkeys(c["batch"] for c in minibatch))
        runs = list(dict.fromkeys((c["case"], c["precision"]) for c in minibatch))
        lookup = {(c["batch"], (c["case"], c["precision"])): c for c in minibatch}
        for ax, key, title in (
                (ax_speed, "pyg_over_ours", "mini-batch training step: PyG / ours"),
                (ax_new, "new_over_same_graph",
                 "mini-batch training step: ours new graph / same graph")):
            _bars(ax, batches, [_series(f"{case} {precision}", batches, lookup,
                                        (case, precision), key) for case, precision in runs])
            ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot written to {path}"


def _series(label: str, groups: List[str], lookup: dict, which: object, key: str) -> Series:
    """The values of ``key`` in ``lookup[(group, which)]`` for every group."""
    found = [lookup.get((g, which), {}) for g in groups]
    return label, [r.get(key) for r in found], [r.get("status", "") for r in found]


def _bars(ax, groups: List[str], series: List[Series]) -> None:
    """Grouped bars: one group per graph or batch, one bar per series, each
    labelled with its value; a missing value is labelled with its status."""
    from matplotlib.ticker import FuncFormatter

    width = 0.8 / max(1, len(series))
    found: List[float] = []
    for k, (label, values, statuses) in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        bars = ax.bar(xs, [math.nan if v is None else v for v in values], width, label=label)
        ax.bar_label(bars, ["" if v is None else f"{v:.2g}" for v in values], fontsize=6)
        found += [v for v in values if v is not None]
        for x, v, status in zip(xs, values, statuses):
            if v is None:
                ax.text(x, 0.02, status if status not in ("ok", "") else "n/a", rotation=90,
                        ha="center", va="bottom", fontsize=7, transform=ax.get_xaxis_transform())
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    # At least 0.5x..2x, so that bars near 1x do not fill or vanish from the axis.
    ax.set_ylim(min([0.5, *found]) / 1.5, max([2.0, *found]) * 1.5)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_xticks(range(len(groups)), groups, rotation=20, fontsize=8)
    ax.legend(fontsize=7)
