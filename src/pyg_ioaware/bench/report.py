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
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import torch

from .cases import OURS, Case, MinibatchCase
from .graphs import SUITE
from .minibatch import OURS_SAME_GRAPH, PYG

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


def minibatch_comparisons(rows: Iterable[Row]) -> List[Row]:
    """Per mini-batch size, case and precision: the three step times and
    ``pyg_over_ours`` (PyG's step ms / ours, with a new graph every step) and
    ``new_over_same_graph`` (ours with a new graph / ours with the graph
    reused). A ratio is None where one of its steps did not run; ``status``
    is "ok" when all three ran, else which did not."""
    groups: Dict[tuple, Dict[str, Row]] = {}
    for row in rows:
        groups.setdefault((row["batch"], row["case"], row["precision"]), {})[row["impl"]] = row
    out = []
    for (batch, case, precision), impls in groups.items():
        ms = {impl: (r["step_ms"] if r["status"] == "ok" else None) for impl, r in impls.items()}
        ours, pyg, same = ms.get(OURS), ms.get(PYG), ms.get(OURS_SAME_GRAPH)
        missing = [f"{impl}: {r['status']}" for impl, r in impls.items() if r["status"] != "ok"]
        out.append({"batch": batch, "case": case, "precision": precision,
                    "status": "; ".join(missing) or "ok",
                    "ours_ms": ours, "pyg_ms": pyg, "same_graph_ms": same,
                    "pyg_over_ours": _ratio(pyg, ours),
                    "new_over_same_graph": _ratio(ours, same)})
    return out


def _verdict(value: Optional[float], bar: float, better: str) -> str:
    if value is None:
        return "n/a"
    return "met" if (value >= bar if better == "higher" else value <= bar) else "NOT met"


def check_bars(rows: Sequence[Row], cases: Sequence[Case],
               minibatch_rows: Sequence[Row] = (),
               minibatch_cases: Sequence[MinibatchCase] = (),
               kernel_rows: Sequence[Row] = (), scale: float = 1.0) -> List[Row]:
    """Every bar of docs/benchmark_protocol.md that applies to the cases run: one entry per
    check, with status "met", "NOT met" or "n/a" (no data to decide) and
    ``better``: "higher" (value >= bar) or "lower" (value <= bar).

    ``kernel_rows``: the kernels-alone rows (bench.bandwidth), for the
    share-of-copy bars; ``scale``: the graphs' scale. The bars on named
    graphs (absolute ms, kernel share of copy) hold at protocol size only:
    on scaled graphs they are n/a, their measured value kept. The geometric
    means (against the baseline, bf16 against our fp32) take every suite
    graph: for a case run on part of the suite they are n/a, their value
    kept."""
    checks: List[Row] = []

    def add(what: str, value: Optional[float], bar: float, detail: str = "",
            better: str = "higher", applies: bool = True, unit: str = "x") -> None:
        checks.append({"check": what, "value": value, "bar": bar, "better": better,
                       "status": _verdict(value, bar, better) if applies else "n/a",
                       "detail": detail, "unit": unit})

    _layer_checks(rows, cases, add)
    _named_graph_checks(rows, kernel_rows, cases, scale, add)
    if minibatch_cases:
        _minibatch_checks(minibatch_rows, minibatch_cases, add)
    return checks


def _suite_left_out(rows: Sequence[Row], case: Case) -> str:
    """The suite graphs ``case`` was not run on, as a bar check's detail
    ("" where it ran on all): a geometric mean over the rest is not the
    protocol's, which takes every suite graph (where the baseline runs)."""
    ran = {r["graph"] for r in rows if r["impl"] == OURS and r["case"] == case.name}
    left_out = [name for name in SUITE if name not in ran]
    if not left_out:
        return ""
    return (f"; not run on {', '.join(left_out)}: the bar takes every suite graph "
            f"(--graphs all, or --append the rest)")


def _layer_checks(rows: Sequence[Row], cases: Sequence[Case], add: Callable) -> None:
    comps = comparisons(rows)
    summary = {(s["case"], s["precision"], s["baseline"]): s for s in summarize(rows)}
    ours_rows = [r for r in rows if r["impl"] == OURS]
    for case in cases:
        # A geometric mean over part of the suite decides nothing: n/a, its value kept.
        left_out = _suite_left_out(rows, case)
        if case.bar is not None:
            bar = case.bar
            s = summary.get((case.name, bar.precision, bar.baseline))
            where = f"{case.name} {bar.precision} vs {bar.baseline}"
            graphs = f"geomean over {len(s['graphs'])} graphs{left_out}" if s else "not run"
            for key, label, threshold in (("fwd_speedup", "forward speedup", bar.fwd),
                                          ("bwd_speedup", "backward speedup", bar.bwd),
                                          ("mem_ratio", "memory ratio", bar.mem)):
                add(f"{where}: {label}", s[key] if s else None, threshold, graphs,
                    applies=not left_out)

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
                    case.bf16_over_fp32, f"geomean over {len(pairs)} graphs{left_out}",
                    applies=not left_out)

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
    add("ours runs on every graph (no OOM, no error)", len(failed) if ours_rows else None, 0,
        "; ".join(failed), better="lower")


def _named_graph_checks(rows: Sequence[Row], kernel_rows: Sequence[Row],
                        cases: Sequence[Case], scale: float, add: Callable) -> None:
    """Per case, its absolute ms bars (our layer, or its forward and
    backward kernels alone, on one graph: forward and backward at most the
    bar) and its kernel bars (one kernel alone on one graph at least a share
    of copy bandwidth)."""
    scaled = scale != 1.0
    note = f"; graphs scaled by {scale:g}: the bar holds at protocol size" if scaled else ""
    ours = {(r["graph"], r["case"], r["precision"]): r for r in rows if r["impl"] == OURS}
    kernels = {(r["graph"], r["case"], r["precision"], r["kernel"]): r for r in kernel_rows}
    for case in cases:
        for bar in case.absolute_bars:
            if bar.kernels is None:
                layer = ours.get((bar.graph, case.name, bar.precision))
                phases = [(layer, "fwd_ms", "forward"), (layer, "bwd_ms", "backward")]
            else:
                phases = [(kernels.get((bar.graph, case.name, bar.precision, kernel)), "ms",
                           kernel) for kernel in bar.kernels]
            for (row, key, label), threshold in zip(phases, (bar.fwd_ms, bar.bwd_ms)):
                ok = row is not None and row["status"] == "ok"
                why = "not run" if row is None else ("" if ok else row["status"])
                add(f"{case.name} {bar.precision} on {bar.graph}: {label} ms",
                    row[key] if ok else None, threshold,
                    f"{why or 'ours'}; bar set on an H200{note}", "lower", not scaled, "ms")
        for bar in case.kernel_bars:
            row = kernels.get((bar.graph, case.name, bar.precision, bar.kernel))
            ok = row is not None and row["status"] == "ok"
            why = "not run" if row is None else (
                f"{row['gbs']:.0f} GB/s" if ok else row["status"])
            add(f"{case.name} {bar.precision} on {bar.graph}: {bar.kernel} share of copy",
                row["share_of_copy"] if ok else None, bar.share, f"{why}{note}", "higher",
                not scaled, "share")


def _minibatch_checks(rows: Sequence[Row], cases: Sequence[MinibatchCase],
                      add: Callable) -> None:
    """Per case and precision, the worst batch size: step speedup against PyG
    (at least the bar) and new graph over same graph (at most the bar)."""
    comps = minibatch_comparisons(rows)
    for case in cases:
        mine = [c for c in comps if c["case"] == case.name]
        for precision in dict.fromkeys(c["precision"] for c in mine):
            these = [c for c in mine if c["precision"] == precision]
            where = f"{case.name} {precision} mini-batch"
            for key, label, pick, threshold, better in (
                    ("pyg_over_ours", "slowest-batch step speedup vs pyg", min,
                     case.bar.speedup, "higher"),
                    ("new_over_same_graph", "new graph / same graph step, worst batch", max,
                     case.bar.new_graph, "lower")):
                ran = [c for c in these if c[key] is not None]
                worst = pick(ran, key=lambda c: c[key], default=None)
                add(f"{where}: {label}", worst[key] if worst else None, threshold,
                    f"worst: {worst['batch']}, over {len(ran)} batches" if worst else
                    "no batch ran", better)
    ours = [r for r in rows if r["impl"] in (OURS, OURS_SAME_GRAPH)]
    failed = [f"{r['batch']} {r['case']} {r['precision']} {r['impl']}: {r['status']}"
              for r in ours if r["status"] != "ok"]
    add("ours runs every mini-batch step (no OOM, no error)", len(failed) if ours else None, 0,
        "; ".join(failed), better="lower")


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


def format_minibatch(minibatch: Dict[str, object]) -> str:
    """The mini-batch cases: the batches (shape, Graph build, first call of
    one layer), then the training step per case, precision and variant."""
    sizes = [[name, str(b["seeds"]), str(b["fanouts"]), str(b["D"]), f"{b['num_nodes']:,.0f}",
              f"{b['num_edges']:,.0f}", _fmt(b["build_ms"]), _fmt(b["graph_mb"], digits=1)]
             for name, b in minibatch["batches"].items()]
    calls = [[name, case, _fmt(c.get("first_call_ms")) if c["status"] == "ok" else c["status"],
              _fmt(c.get("repeat_call_ms"))]
             for name, b in minibatch["batches"].items() for case, c in b["first_call"].items()]
    steps = [[c["batch"], c["case"], c["precision"], _fmt(c["ours_ms"]), _fmt(c["pyg_ms"]),
              _fmt(c["same_graph_ms"]), _fmt(c["pyg_over_ours"], "x"),
              _fmt(c["new_over_same_graph"], "x"), "" if c["status"] == "ok" else c["status"]]
             for c in minibatch["comparisons"]]
    return "\n".join([
        "Mini-batches (means over the batches; Graph build: median, fresh edge_index)",
        _table(["batch", "seeds", "fanouts", "D", "nodes", "edges", "Graph build ms",
                "Graph MB"], sizes), "",
        "One layer conv(D, D) fp32 fwd+bwd: first call on a fresh graph, then repeated",
        _table(["batch", "case", "first call ms", "repeated ms"], calls), "",
        "Training step, ms (ours and pyg: a new edge_index every step; same graph: ours "
        "with the batches' own edge_index)",
        _table(["batch", "case", "dtype", "ours", "pyg", "ours same graph", "pyg / ours",
                "new / same graph", "not run"], steps)])


def format_summary(summary: Sequence[Row], checks: Sequence[Row],
                   minibatch: Sequence[Row] = ()) -> str:
    """The short summary printed last: geometric means, the mini-batch step
    ratios, then the bar."""
    lines = [[s["case"], s["precision"], s["baseline"], str(len(s["graphs"])),
              _fmt(s["fwd_speedup"], "x"), _fmt(s["bwd_speedup"], "x"), _fmt(s["mem_ratio"], "x"),
              ", ".join(f"{g}: {st}" for g, st in s["not_run"].items())] for s in summary]
    text = ["Summary: ours vs baseline, geometric mean over the graphs both ran",
            _table(["case", "dtype", "vs", "graphs", "fwd", "bwd", "memory", "not run"], lines)]
    if minibatch:
        lines = [[c["batch"], c["case"], c["precision"], _fmt(c["pyg_over_ours"], "x"),
                  _fmt(c["new_over_same_graph"], "x")] for c in minibatch]
        text += ["", "Mini-batch training step: PyG / ours, ours new graph / same graph",
                 _table(["batch", "case", "dtype", "pyg / ours", "new / same graph"], lines)]
    text += ["", "The bar (docs/benchmark_protocol.md):"]
    for c in checks:
        value = _check_value(c)
        detail = f"  ({c['detail']})" if c["detail"] else ""
        bar = f"{'>=' if c['better'] == 'higher' else '<='} {c['bar']}"
        text.append(f"  [{c['status']:>7}] {c['check']}: {value} (bar {bar}){detail}")
    return "\n".join(text)


def _check_value(check: Row) -> str:
    """A check's value as the summary prints it: a count, ms, a share or a
    ratio (unit "x", the default)."""
    value, unit = check["value"], check.get("unit", "x")
    if isinstance(value, int):
        return str(value)
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.3f} ms"
    if unit == "share":
        return f"{value:.0%}"
    return _fmt(value, "x")


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
    text = [title, _table(["graph", "case", "dtype", "kernel", "ms", "GB/s", "of copy"], lines)]
    split = format_split(bandwidth["rows"])
    return "\n".join(text + (["", split] if split else []))


def format_split(kernel_rows: Sequence[Row]) -> str:
    """The light/heavy row split of the kernels that report one (key
    "split" of a kernel row), once per graph; empty if none does."""
    splits = {}
    for r in kernel_rows:
        if r.get("split") is not None:
            splits.setdefault(r["graph"], r["split"])
    if not splits:
        return ""
    lines = [[graph, f"{s['quantile']:g}", _fmt(s["quantile_degree"], digits=0),
              "-" if s["threshold"] is None else f"> {s['threshold']}", str(s["max_degree"]),
              f"{s['hub_rows']:,} ({s['hub_row_share']:.3%})",
              f"{s['hub_edges']:,} ({s['hub_edge_share']:.1%})", "yes" if s["used"] else "no"]
             for graph, s in splits.items()]
    return "\n".join([
        "Light/heavy split of the min/max kernels (hub rows: chunks over all SMs; light rows: "
        "a warp each)",
        _table(["graph", "quantile", "quantile degree", "hub degree", "max degree", "hub rows",
                "hub edges", "split here"], lines)])
