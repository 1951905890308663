"""Everything the CLI reports: ratios, the bar check, table, JSON, plot.

Results are plain dicts (one per graph x case x precision x implementation),
so the JSON file holds exactly what the tables are computed from. Ratios are
"ours is X times better": baseline ms / our ms, baseline MB / our MB.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
from importlib import metadata
from typing import Dict, Iterable, List, Optional, Sequence

import torch

from .cases import Case

OURS = "ours"
Row = Dict[str, object]


def environment(device: torch.device) -> Dict[str, object]:
    """Device name, library versions and date for the JSON file."""
    import torch_geometric

    import pyg_ioaware

    try:
        ours_version = metadata.version("pyg_ioaware")
    except metadata.PackageNotFoundError:
        ours_version = getattr(pyg_ioaware, "__version__", "unknown (not installed)")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {
        "device": str(device),
        "device_name": name or platform.machine(),
        "native_library": pyg_ioaware.cuda_available(),
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "pyg_ioaware": ours_version,
        "python": platform.python_version(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def write_json(path: str, payload: Dict[str, object]) -> None:
    """Write atomically, so an interrupted run leaves the previous file whole."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1)
    os.replace(tmp, path)


# ------------------------------------------------------------------ ratios

def _ratio(baseline: Optional[float], ours: Optional[float]) -> Optional[float]:
    if baseline is None or ours is None or ours <= 0:
        return None
    return baseline / ours


def _geomean(values: Sequence[float]) -> Optional[float]:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _groups(rows: Iterable[Row]) -> Dict[tuple, Dict[str, Row]]:
    """(graph, case, precision) -> impl -> row, in run order."""
    groups: Dict[tuple, Dict[str, Row]] = {}
    for row in rows:
        groups.setdefault((row["graph"], row["case"], row["precision"]), {})[row["impl"]] = row
    return groups


def comparisons(rows: Iterable[Row]) -> List[Row]:
    """Ours against every baseline of the same graph, case and precision.

    ``status`` is "ok" when both ran, else the status of the one that did not.
    """
    out = []
    for (graph, case, precision), impls in _groups(rows).items():
        ours = impls.get(OURS)
        if ours is None:
            continue
        for impl, base in impls.items():
            if impl == OURS:
                continue
            status = ours["status"] if ours["status"] != "ok" else base["status"]
            ok = status == "ok"
            out.append({
                "graph": graph, "case": case, "precision": precision, "baseline": impl,
                "status": status,
                "fwd_speedup": _ratio(base["fwd_ms"], ours["fwd_ms"]) if ok else None,
                "bwd_speedup": _ratio(base["bwd_ms"], ours["bwd_ms"]) if ok else None,
                "mem_ratio": (_ratio(base["peak_fwd_bwd_mb"], ours["peak_fwd_bwd_mb"])
                              if ok else None),
            })
    return out


def summarize(rows: Sequence[Row]) -> List[Row]:
    """Geometric means over the graphs where both ours and the baseline ran,
    per case, precision and baseline."""
    by_key: Dict[tuple, List[Row]] = {}
    for c in comparisons(rows):
        by_key.setdefault((c["case"], c["precision"], c["baseline"]), []).append(c)
    summary = []
    for (case, precision, baseline), comps in by_key.items():
        ran = [c for c in comps if c["status"] == "ok"]
        mems = [c["mem_ratio"] for c in ran if c["mem_ratio"] is not None]
        summary.append({
            "case": case, "precision": precision, "baseline": baseline,
            "graphs": [c["graph"] for c in ran],
            "not_run": {c["graph"]: c["status"] for c in comps if c["status"] != "ok"},
            "fwd_speedup": _geomean([c["fwd_speedup"] for c in ran]),
            "bwd_speedup": _geomean([c["bwd_speedup"] for c in ran]),
            "mem_ratio": _geomean(mems) if len(mems) == len(ran) else None,
        })
    return summary


def _verdict(value: Optional[float], bar: float) -> str:
    if value is None:
        return "n/a"
    return "met" if value >= bar else "NOT met"


def check_bars(rows: Sequence[Row], cases: Sequence[Case]) -> List[Row]:
    """Every bar of BENCHMARKS.md that applies to the cases run: one entry per
    check, with status "met", "NOT met" or "n/a" (no data to decide)."""
    checks: List[Row] = []

    def add(what: str, value: Optional[float], bar: float, detail: str = "") -> None:
        checks.append({"check": what, "value": value, "bar": bar,
                       "status": _verdict(value, bar), "detail": detail})

    comps = comparisons(rows)
    summary = {(s["case"], s["precision"], s["baseline"]): s for s in summarize(rows)}
    ours_rows = [r for r in rows if r["impl"] == OURS]
    for case in cases:
        if case.bar is not None:
            bar = case.bar
            s = summary.get((case.name, bar.precision, bar.baseline))
            where = f"{case.name} {bar.precision} vs {bar.baseline}"
            graphs = f"geomean over {len(s['graphs'])} graphs" if s else "not run"
            for key, label, threshold in (("fwd_speedup", "forward speedup", bar.fwd),
                                          ("bwd_speedup", "backward speedup", bar.bwd),
                                          ("mem_ratio", "memory ratio", bar.mem)):
                add(f"{where}: {label}", s[key] if s else None, threshold, graphs)

        # bf16 against our own fp32, geometric mean over the graphs both ran.
        if case.bf16_over_fp32 is not None:
            own = {(r["graph"], r["precision"]): r for r in ours_rows
                   if r["case"] == case.name and r["status"] == "ok"}
            pairs = [(own[(g, "fp32")], own[(g, "bf16")]) for g, p in own if p == "bf16"
                     and (g, "fp32") in own]
            for phase in ("fwd", "bwd"):
                ratios = [_ratio(fp32[f"{phase}_ms"], bf16[f"{phase}_ms"])
                          for fp32, bf16 in pairs]
                add(f"{case.name} bf16 vs our fp32: {phase} speedup", _geomean(ratios),
                    case.bf16_over_fp32, f"geomean over {len(pairs)} graphs")

        # No slower than the named baselines on any graph, in any precision.
        for baseline in case.no_slower_than:
            against = [c for c in comps if c["case"] == case.name and c["baseline"] == baseline]
            ran = [c for c in against if c["status"] == "ok"]
            for precision in dict.fromkeys(c["precision"] for c in against):
                mine = [c for c in ran if c["precision"] == precision]
                for phase in ("fwd", "bwd"):
                    worst = min(mine, key=lambda c: c[f"{phase}_speedup"], default=None)
                    add(f"{case.name} {precision} vs {baseline}: slowest-graph {phase} speedup",
                        worst[f"{phase}_speedup"] if worst else None, 1.0,
                        f"worst: {worst['graph']}, over {len(mine)} graphs" if worst else
                        "no graph ran")

    failed = [f"{r['graph']} {r['case']} {r['precision']}: {r['status']}"
              for r in ours_rows if r["status"] != "ok"]
    checks.append({"check": "ours runs on every graph (no OOM, no error)", "value": len(failed),
                   "bar": 0,
                   "status": "NOT met" if failed else ("met" if ours_rows else "n/a"),
                   "detail": "; ".join(failed)})
    return checks


# ------------------------------------------------------------------ tables

def _fmt(value: Optional[float], unit: str = "", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
    render = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([render(header), render(["-" * w for w in widths])] +
                     [render(line) for line in lines])


def format_results(rows: Sequence[Row]) -> str:
    """The full table: one line per implementation; baseline lines carry how
    much faster and smaller ours is than that baseline."""
    comps = {(c["graph"], c["case"], c["precision"], c["baseline"]): c
             for c in comparisons(rows)}
    lines = []
    for row in rows:
        key = (row["graph"], row["case"], row["precision"], row["impl"])
        c = comps.get(key, {})
        ok = row["status"] == "ok"
        lines.append([
            row["graph"], row["case"], row["precision"], row["impl"],
            _fmt(row["fwd_ms"]) if ok else row["status"], _fmt(row["bwd_ms"]) if ok else "",
            _fmt(row["peak_fwd_mb"], digits=0) if ok else "",
            _fmt(row["peak_fwd_bwd_mb"], digits=0) if ok else "",
            _fmt(c.get("fwd_speedup"), "x"), _fmt(c.get("bwd_speedup"), "x"),
            _fmt(c.get("mem_ratio"), "x"),
        ])
    header = ["graph", "case", "dtype", "impl", "fwd ms", "bwd ms", "MB fwd", "MB fwd+bwd",
              "ours fwd", "ours bwd", "ours mem"]
    return _table(header, lines)


def format_graphs(graphs: Dict[str, Row]) -> str:
    lines = [[name, f"{g['num_nodes']:,}", f"{g['num_edges']:,}", _fmt(g["generate_ms"], digits=1),
              _fmt(g["build_ms"]), _fmt(g["graph_mb"], digits=1)] for name, g in graphs.items()]
    return _table(["graph", "nodes", "edges", "generate ms", "Graph build ms", "Graph MB"], lines)


def format_summary(summary: Sequence[Row], checks: Sequence[Row]) -> str:
    """The short summary printed last: geometric means, then the bar."""
    lines = [[s["case"], s["precision"], s["baseline"], str(len(s["graphs"])),
              _fmt(s["fwd_speedup"], "x"), _fmt(s["bwd_speedup"], "x"), _fmt(s["mem_ratio"], "x"),
              ", ".join(f"{g}: {st}" for g, st in s["not_run"].items())] for s in summary]
    text = ["Summary: ours vs baseline, geometric mean over the graphs both ran",
            _table(["case", "dtype", "vs", "graphs", "fwd", "bwd", "memory", "not run"], lines),
            "", "The bar (BENCHMARKS.md):"]
    for c in checks:
        value = c["value"] if isinstance(c["value"], int) else _fmt(c["value"], "x")
        detail = f"  ({c['detail']})" if c["detail"] else ""
        text.append(f"  [{c['status']:>7}] {c['check']}: {value} (bar {c['bar']}){detail}")
    return "\n".join(text)


def format_bandwidth(bandwidth: Dict[str, object]) -> str:
    """The aggregation kernels alone: ms, GB/s and share of copy bandwidth."""
    lines = []
    for r in bandwidth["rows"]:
        ok = r["status"] == "ok"
        lines.append([r["graph"], r["case"], r["precision"], r["kernel"],
                      _fmt(r.get("ms"), digits=3) if ok else r["status"],
                      _fmt(r.get("gbs"), digits=0) if ok else "",
                      f"{r['share_of_copy']:.0%}" if ok else ""])
    title = (f"Aggregation kernels alone (minimal bytes {bandwidth['model']}; "
             f"device copy {bandwidth['copy_gbs']:.0f} GB/s read+write)")
    return "\n".join([title, _table(["graph", "case", "dtype", "kernel", "ms", "GB/s",
                                      "of copy"], lines)])


# -------------------------------------------------------------------- plot

def plot(rows: Sequence[Row], path: str) -> str:
    """Speedup and memory ratio per graph, one row of panels per case and
    precision, saved as PNG. Returns a line saying what was done."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    comps = comparisons(rows)
    panels = list(dict.fromkeys((c["case"], c["precision"]) for c in comps))
    if not panels:
        return "nothing to plot"
    fig, axes = plt.subplots(len(panels), 2, figsize=(13, 3.4 * len(panels)), squeeze=False)
    for (case, precision), (ax_speed, ax_mem) in zip(panels, axes):
        mine = [c for c in comps if (c["case"], c["precision"]) == (case, precision)]
        graphs = list(dict.fromkeys(c["graph"] for c in mine))
        baselines = list(dict.fromkeys(c["baseline"] for c in mine))
        lookup = {(c["graph"], c["baseline"]): c for c in mine}
        _bars(ax_speed, graphs, lookup, [(b, k) for b in baselines
                                         for k in ("fwd_speedup", "bwd_speedup")])
        _bars(ax_mem, graphs, lookup, [(b, "mem_ratio") for b in baselines])
        ax_speed.set_title(f"{case} {precision}: speedup of ours")
        ax_mem.set_title(f"{case} {precision}: memory ratio (baseline / ours)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot written to {path}"


def _bars(ax, graphs: List[str], lookup: Dict[tuple, Row], series: List[tuple]) -> None:
    """Grouped bars (one group per graph, one bar per series); a missing value
    is labelled with its status (OOM, unsupported, n/a on CPU)."""
    from matplotlib.ticker import FuncFormatter

    width = 0.8 / len(series)
    plotted = False
    for k, (baseline, key) in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(graphs))]
        values = [lookup.get((g, baseline), {}).get(key) for g in graphs]
        ax.bar(xs, [math.nan if v is None else v for v in values], width,
               label=f"vs {baseline} {key.split('_')[0]}")
        plotted = plotted or any(v is not None for v in values)
        for x, v, g in zip(xs, values, graphs):
            if v is None:
                status = lookup.get((g, baseline), {}).get("status", "")
                ax.text(x, 0.02, status if status != "ok" else "n/a", rotation=90,
                        ha="center", va="bottom", fontsize=7, transform=ax.get_xaxis_transform())
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    if not plotted:
        ax.set_ylim(0.5, 2.0)
    ax.set_xlim(-0.5, len(graphs) - 0.5)
    ax.set_xticks(range(len(graphs)), graphs, rotation=20, fontsize=8)
    ax.legend(fontsize=7)
