"""``python -m pyg_ioaware.bench``: run the suite of docs/benchmark_protocol.md.

For every graph: generate it, time the Graph build once, then for every case
and precision time ours and each baseline in the same process, in turns. Then, for
every mini-batch size, the training step of a 2-layer model per mini-batch
case (bench.minibatch). The JSON file is rewritten after every case, so a
run cut short keeps what it measured; the short summary is printed last.
Without a GPU a CPU-sized suite runs (see :func:`_default_sizes`).

A long suite can run in chunks (e.g. a graph or two per command) into one
folder with ``--append``: each chunk adds its rows to the results.json
there (replacing rows it measures again), and the summary and the bar are
computed over everything the folder holds.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import traceback
from typing import Callable, Dict, List, Optional, Sequence

import torch

from . import graphs as suite
from . import minibatch
from .bandwidth import copy_bandwidth_gbs, measure_kernels
from .cases import (CASES, MINIBATCH_CASES, OURS, Case, Impl, Unsupported, Workload,
                    input_features, select)
from .plot import plot
from .progress import Progress
from .report import (check_bars, comparisons, environment, format_bandwidth, format_graphs,
                     format_minibatch, format_results, format_summary, minibatch_comparisons,
                     summarize, write_json)
from .timing import (MB, PRECISIONS, LayerTimer, Measurement, feature_dtype, free_memory,
                     measure_interleaved, oom_message, time_once)

PROTOCOL_MIN_ITERS = 15
# Rounds in which ours and the baselines take turns (run_case); as the
# mini-batch steps' (minibatch.ROUNDS).
LAYER_ROUNDS = minibatch.ROUNDS
# The CPU-sized suite (no GPU): about a minute on 2 cores. fp32 only: under
# bf16 autocast torch's CPU kernels run several times slower than in fp32
# (PyG's layers as ours; GATv2Conv (8, 128)'s backward 28 s against 1.4 s an
# iteration on arxiv-like at scale 0.03), which took the suite past 15 minutes.
CPU_SCALE = 0.01
CPU_ITERS, CPU_WARMUP = 3, 1
CPU_DTYPES = "fp32"
GPU_DTYPES = "fp32,bf16"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m pyg_ioaware.bench",
        description="Time pyg_ioaware layers against PyG and torch.sparse on the "
                    "synthetic graph suite of the benchmark protocol (docs/benchmark_protocol.md, "
                    "the documentation's 'Benchmark protocol' page). Without a GPU a "
                    "CPU-sized suite runs (scaled-down quick graphs, fewer iterations) "
                    "unless sizes are given explicitly.")
    p.add_argument("--graphs", default=None,
                   help=f"comma list of {', '.join(suite.SUITE)} or 'all' (default: all; "
                        "with --quick or on CPU: the three small ones)")
    p.add_argument("--cases", default="all",
                   help="comma list of case keys (e.g. gcn-d512), names or families, "
                        "'all' or 'none' (default: all)")
    p.add_argument("--dtypes", default=None,
                   help="comma list of precisions: fp32, bf16, fp16 (16-bit = torch.autocast) "
                        f"(default: {GPU_DTYPES}; on CPU {CPU_DTYPES})")
    p.add_argument("--iters", type=int, default=None,
                   help=f"timed iterations (default 20, with --quick 15, on CPU {CPU_ITERS})")
    p.add_argument("--warmup", type=int, default=None,
                   help=f"warm-up iterations (default 5, with --quick 3, on CPU {CPU_WARMUP})")
    p.add_argument("--scale", type=float, default=None,
                   help="multiplier on every graph's node and edge counts and on the "
                        "mini-batch seed counts (their node and edge counts follow): 0.1 = a "
                        f"tenth of the protocol size (default 1; on CPU {CPU_SCALE})")
    sizes = "; ".join(f"{b.name}: {b.seeds} seeds, fanouts {list(b.fanouts)}, D={b.channels}"
                      for b in minibatch.SIZES.values())
    p.add_argument("--minibatch", default=None,
                   help=f"comma list of mini-batch sizes ({sizes}), 'all' or 'none' "
                        "(default: all; on CPU: small)")
    p.add_argument("--minibatch-cases", default="all",
                   help="comma list of mini-batch layers ("
                        f"{', '.join(f'{c.key}: {c.name}' for c in MINIBATCH_CASES.values())}), "
                        "families, 'all' or 'none' (default: all)")
    p.add_argument("--out", default="bench_results", help="output folder (default bench_results/)")
    p.add_argument("--append", action="store_true",
                   help="add to the results.json in --out (from earlier runs on the same "
                        "device at the same --scale and --seed) instead of starting afresh: "
                        "rows measured again are replaced, the summary and the bar cover all "
                        "(run a long suite in chunks of a few graphs)")
    p.add_argument("--quick", action="store_true",
                   help="arxiv-like, roads-like and tolokers-like only, fewer iterations")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--seed", type=int, default=0, help="seed of graphs, features and weights")
    args = p.parse_args(argv)

    args.device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.device.type == "cuda":
        if not torch.cuda.is_available():
            p.error("--device cuda: no CUDA GPU is visible")
        if args.device.index is None:
            args.device = torch.device("cuda", torch.cuda.current_device())
    _default_sizes(args)
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    if args.scale <= 0:
        p.error("--scale must be positive")
    args.graphs = list(suite.SUITE) if args.graphs == "all" else [
        g.strip() for g in args.graphs.split(",")]
    unknown = [g for g in args.graphs if g not in suite.SUITE]
    if unknown:
        p.error(f"unknown graphs {unknown}; expected {', '.join(suite.SUITE)} or 'all'")
    args.dtypes = [d.strip() for d in args.dtypes.split(",")]
    if not args.dtypes or any(d not in PRECISIONS for d in args.dtypes):
        p.error(f"--dtypes: expected a comma list of {', '.join(PRECISIONS)}")
    try:
        args.cases = select(args.cases)
        args.minibatch_cases = select(args.minibatch_cases, MINIBATCH_CASES)
    except ValueError as error:
        p.error(str(error))
    names = {"all": ",".join(minibatch.SIZES), "none": ""}.get(args.minibatch, args.minibatch)
    args.minibatch = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in args.minibatch if n not in minibatch.SIZES]
    if unknown:
        p.error(f"unknown mini-batch sizes {unknown}; expected "
                f"{', '.join(minibatch.SIZES)}, 'all' or 'none'")
    # Nothing to run on graphs without cases, nor on batches without layers.
    if not args.cases:
        args.graphs = []
    if not args.minibatch_cases:
        args.minibatch = []
    return args


def _default_sizes(args: argparse.Namespace) -> None:
    """Fill the sizes left unset: what was given, else the CPU-sized suite on
    a CPU, else --quick's, else the protocol's. ``args.cpu_sized`` lists what
    the CPU-sized suite chose (empty on a GPU), for the notice."""
    cpu = args.device.type == "cpu"
    chosen = []
    if args.scale is None:
        args.scale = CPU_SCALE if cpu else 1.0
        if cpu:
            chosen.append(f"sizes scaled by {CPU_SCALE}")
    if args.graphs is None:
        args.graphs = ",".join(suite.QUICK) if cpu or args.quick else "all"
        if cpu:
            chosen.append(f"graphs {args.graphs.replace(',', ', ')}")
    if args.iters is None:
        args.iters = CPU_ITERS if cpu else (15 if args.quick else 20)
        if cpu:
            chosen.append(f"{CPU_ITERS} timed iterations")
    if args.warmup is None:
        args.warmup = CPU_WARMUP if cpu else (3 if args.quick else 5)
    if args.minibatch is None:
        args.minibatch = "small" if cpu else "all"
        if cpu:
            chosen.append("mini-batch small")
    if args.dtypes is None:
        args.dtypes = CPU_DTYPES if cpu else GPU_DTYPES
        if cpu:
            chosen.append(f"dtypes {CPU_DTYPES}")
    args.cpu_sized = chosen


def cpu_notice(args: argparse.Namespace) -> Optional[str]:
    """The line printed first on a CPU: why it runs there and at what size."""
    if args.device.type != "cpu":
        return None
    why = ("No CUDA GPU is visible" if not torch.cuda.is_available() else "--device cpu")
    if not args.cpu_sized:
        return f"{why}: running on CPU at the sizes given."
    return (f"{why}: running a CPU-sized suite ({'; '.join(args.cpu_sized)}); "
            f"--scale, --graphs, --iters, --minibatch and --dtypes choose others.")


def describe(m: Measurement) -> str:
    """One progress line for a layer measurement."""
    if m.status != "ok":
        return f"{m.status}: {m.detail}"
    mem = ("" if m.peak_fwd_bwd_mb is None else
           f", peak {m.peak_fwd_mb:.0f} / {m.peak_fwd_bwd_mb:.0f} MB")
    return f"fwd {m.fwd_ms:.3f} ms, bwd {m.bwd_ms:.3f} ms{mem}"


def graph_build(edge_index: torch.Tensor, num_nodes: int) -> Dict[str, float]:
    """Time ``Graph.from_input`` once on a fresh clone (a cold cache), after a
    warm-up on a small slice so one-time library loading is not counted."""
    from pyg_ioaware import Graph

    device = edge_index.device
    Graph.from_input(edge_index[:, :1024].clone(), num_nodes=num_nodes)
    fresh = edge_index.clone()
    ms, graph = time_once(lambda: Graph.from_input(fresh, num_nodes=num_nodes), device)
    return {"build_ms": ms, "graph_mb": graph.nbytes / MB}


def run_case(case: Case, work: Workload, args: argparse.Namespace, progress: Progress,
             label: str) -> List[Dict[str, object]]:
    """Time ours and every baseline for one graph, case and precision, in
    turns (:func:`timing.measure_interleaved`, LAYER_ROUNDS rounds), so a
    drift of the host's speed weighs on each alike. Building ours counts as
    part of its measurement: a failure there gives its row a status, as a
    failure while timing does."""
    torch.manual_seed(args.seed)
    device = work.device
    x = input_features(case, work.num_nodes, device, feature_dtype(work.precision))
    ours: Optional[Impl] = None

    def build_ours() -> Impl:
        nonlocal ours
        ours = case.make_ours(work)
        return ours

    # A baseline gets None for ours where ours did not build (its row says so).
    builders: Dict[str, Callable[[], Impl]] = {OURS: build_ours}
    builders.update({name: (lambda make=make: make(work, ours))
                     for name, make in case.baselines.items()})
    progress.start(f"{label} ({', '.join(builders)}, interleaved)")
    measurements: Dict[str, Measurement] = {}
    timers: Dict[str, LayerTimer] = {}
    for impl_name, build in builders.items():
        try:
            impl = build()
            timers[impl_name] = LayerTimer(impl.step, x, list(impl.module.parameters()),
                                           work.precision)
        except Exception as error:
            measurements[impl_name] = _failure(error)
    impl = None
    measurements.update(measure_interleaved(timers, args.iters, args.warmup, LAYER_ROUNDS,
                                            lambda _, error: _failure(error)))
    timers.clear()
    free_memory(device)
    progress.finish("; ".join(f"{name} {describe(measurements[name])}" for name in builders))
    return [{"impl": name, **dataclasses.asdict(measurements[name])} for name in builders]


def _failure(error: Exception) -> Measurement:
    """The status of what building or timing an implementation raised
    (called inside the ``except`` clause: an unexpected error's traceback
    is printed and the run goes on; the bar check reports it)."""
    if isinstance(error, Unsupported):
        return Measurement("unsupported", detail=str(error))
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return Measurement("OOM", detail=oom_message(error))
    traceback.print_exc()
    return Measurement("error", detail=f"{type(error).__name__}: {error}")


def run_kernels(case: Case, work: Workload, copy_gbs: float, progress: Progress,
                label: str) -> List[Dict[str, object]]:
    """Effective bandwidth of the case's aggregation kernels alone."""
    if case.make_kernels is None:
        return []
    progress.note(f"{label} kernels alone ...")
    try:
        rows = measure_kernels(case.make_kernels(work), work.device, copy_gbs)
    except Unsupported as error:
        rows = [{"kernel": "all", "status": "unsupported", "detail": str(error)}]
    except torch.cuda.OutOfMemoryError as error:
        rows = [{"kernel": "all", "status": "OOM", "detail": oom_message(error)}]
    except Exception as error:  # keep a long run going, as run_case does
        traceback.print_exc()
        rows = [{"kernel": "all", "status": "error",
                 "detail": f"{type(error).__name__}: {error}"}]
    free_memory(work.device)
    for row in rows:
        text = (f"{row['ms']:.3f} ms, {row['gbs']:.0f} GB/s ({row['share_of_copy']:.0%} of copy)"
                if row["status"] == "ok" else f"{row['status']}: {row.get('detail')}")
        progress.note(f"    {row['kernel']}: {text}")
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    notice = cpu_notice(args)
    if notice:
        print(notice, flush=True)
    device = args.device
    if device.type == "cuda":
        torch.cuda.set_device(device)  # events and streams below use the current device
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "results.json")
    plot_path = os.path.join(args.out, "results.png")
    sizes = [minibatch.SIZES[n] for n in args.minibatch]

    env = environment(device)
    deviations = []
    if device.type != "cuda":
        deviations.append(f"device is {device.type} (the protocol times CUDA GPUs)")
    if args.scale != 1.0:
        deviations.append(f"graphs and mini-batches scaled by {args.scale}")
    if args.iters < PROTOCOL_MIN_ITERS:
        deviations.append(f"{args.iters} timed iterations (protocol: >= {PROTOCOL_MIN_ITERS})")
    if device.type == "cuda" and not env["native_library"]:
        deviations.append("native library not loaded: ours runs its plain-torch path")
    payload: Dict[str, object] = {
        "meta": {**env, "args": {
            "graphs": args.graphs, "cases": [c.key for c in args.cases], "dtypes": args.dtypes,
            "iters": args.iters, "warmup": args.warmup, "scale": args.scale, "seed": args.seed,
            "quick": args.quick, "minibatch": [b.name for b in sizes],
            "minibatch_cases": [c.key for c in args.minibatch_cases]},
            "protocol_deviations": deviations},
        "kernel_bandwidth": {"model": "; ".join(dict.fromkeys(
                                 c.bytes_model for c in args.cases if c.bytes_model)),
                             "copy_gbs": copy_bandwidth_gbs(device), "rows": []},
        "graphs": {},
        "results": [],
        "minibatch": {"batches": {}, "results": [], "comparisons": []},
    }
    args.bar_cases, args.bar_minibatch_cases = args.cases, args.minibatch_cases
    if args.append:
        refusal = _append_previous(payload, json_path, args)
        if refusal:
            print(f"--append: {refusal}", flush=True)
            return 2
    rows: List[Dict[str, object]] = payload["results"]
    total = (len(args.graphs) * len(args.dtypes) * len(args.cases) +
             len(sizes) * len(args.minibatch_cases) * len(args.dtypes))
    progress = Progress(total)
    for graph_name in args.graphs:
        # What cases derive from this graph (Workload.derived), dropped with it.
        per_graph: Dict[str, object] = {}
        ms, (edge_index, num_nodes) = time_once(
            lambda: suite.generate(graph_name, args.scale, device, args.seed), device)
        info = {"num_nodes": num_nodes, "num_edges": edge_index.size(1), "generate_ms": ms,
                **graph_build(edge_index, num_nodes)}
        payload["graphs"][graph_name] = info
        progress.note(f"{graph_name}: {num_nodes:,} nodes, {info['num_edges']:,} edges, "
                      f"Graph build {info['build_ms']:.2f} ms")
        for case in args.cases:
            for precision in args.dtypes:
                work = Workload(edge_index, num_nodes, precision, per_graph=per_graph)
                label = f"{graph_name} {case.name} {precision}"
                for row in run_case(case, work, args, progress, label):
                    rows.append({"graph": graph_name, "case": case.name, "key": case.key,
                                 "family": case.family, "config": case.config,
                                 "precision": precision, **row})
                bandwidth = payload["kernel_bandwidth"]
                for row in run_kernels(case, work, bandwidth["copy_gbs"], progress, label):
                    bandwidth["rows"].append({"graph": graph_name, "case": case.name,
                                              "precision": precision, **row})
                free_memory(device)
                _save(json_path, payload, args)
        del edge_index, per_graph
        free_memory(device)
    for size in sizes:
        info, steps = minibatch.run_size(size, args.minibatch_cases, args.dtypes, args, progress)
        earlier = payload["minibatch"]["batches"].get(size.name, {}).get("first_call", {})
        info["first_call"] = {**earlier, **info["first_call"]}
        payload["minibatch"]["batches"][size.name] = info
        payload["minibatch"]["results"] += steps
        _save(json_path, payload, args)
    progress.close()

    _save(json_path, payload, args)
    for table, shown in ((format_graphs(payload["graphs"]), payload["graphs"]),
                         (format_results(rows), rows),
                         (format_minibatch(payload["minibatch"]), payload["minibatch"]["batches"])):
        if shown:
            print()
            print(table)
    print()
    print(plot(rows, plot_path, payload["minibatch"]["comparisons"]))
    print(f"results written to {json_path}")
    for deviation in deviations:
        print(f"note: not a protocol run: {deviation}")
    summary = format_summary(payload["summary"], payload["bars"],
                             payload["minibatch"]["comparisons"])
    if payload["kernel_bandwidth"]["rows"]:
        summary += "\n\n" + format_bandwidth(payload["kernel_bandwidth"])
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write(summary + "\n")
    print()
    print(summary)
    return 0


def _save(path: str, payload: Dict[str, object], args: argparse.Namespace) -> None:
    """Recompute the ratios, summary and bar from the rows so far; write."""
    rows = payload["results"]
    mini = payload["minibatch"]
    mini["comparisons"] = minibatch_comparisons(mini["results"])
    payload.update(comparisons=comparisons(rows), summary=summarize(rows),
                   bars=check_bars(rows, args.bar_cases, mini["results"],
                                   args.bar_minibatch_cases
                                   if args.minibatch or mini["results"] else [],
                                   payload["kernel_bandwidth"]["rows"], args.scale))
    write_json(path, payload)


def _append_previous(payload: Dict[str, object], path: str,
                     args: argparse.Namespace) -> Optional[str]:
    """Merge the results.json at ``path`` (an earlier run) into ``payload``
    for --append: its rows, except those this run measures again (same
    graph or batch, case and precision), its graphs and batches, its
    deviations; ``args.bar_cases`` / ``args.bar_minibatch_cases`` become every
    case either run covers. Returns why it cannot append (other device,
    scale or seed), else None. No file there: nothing to merge."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        previous = json.load(f)
    meta, before = payload["meta"], previous["meta"]
    for what, now, then in (("device", meta["device_name"], before["device_name"]),
                            ("--scale", args.scale, before["args"]["scale"]),
                            ("--seed", args.seed, before["args"]["seed"])):
        if now != then:
            return (f"{path} was measured with {what} {then!r}, this run has {now!r}; "
                    f"use another --out")
    graphs, keys = set(args.graphs), {c.key for c in args.cases}
    names, dtypes = {c.name for c in args.cases}, set(args.dtypes)
    batches, mini_keys = set(args.minibatch), {c.key for c in args.minibatch_cases}
    payload["results"] += [r for r in previous["results"] if not (
        r["graph"] in graphs and r["key"] in keys and r["precision"] in dtypes)]
    bandwidth = payload["kernel_bandwidth"]
    bandwidth["rows"] += [r for r in previous["kernel_bandwidth"]["rows"] if not (
        r["graph"] in graphs and r["case"] in names and r["precision"] in dtypes)]
    bandwidth["model"] = "; ".join(dict.fromkeys(
        m for text in (previous["kernel_bandwidth"]["model"], bandwidth["model"])
        for m in text.split("; ") if m))
    payload["graphs"].update(previous["graphs"])
    mini, mini_before = payload["minibatch"], previous["minibatch"]
    mini["batches"].update(mini_before["batches"])
    mini["results"] += [r for r in mini_before["results"] if not (
        r["batch"] in batches and r["key"] in mini_keys and r["precision"] in dtypes)]
    meta["protocol_deviations"] = list(dict.fromkeys(
        before["protocol_deviations"] + meta["protocol_deviations"]))
    meta["appended_to"] = before.get("appended_to", []) + [
        {"date": before["date"], "args": before["args"]}]
    cases = before.get("cases_so_far", before["args"]["cases"]) + [c.key for c in args.cases]
    mini_cases = (before.get("minibatch_cases_so_far", before["args"]["minibatch_cases"]) +
                  [c.key for c in args.minibatch_cases])
    meta["cases_so_far"] = list(dict.fromkeys(k for k in cases if k in CASES))
    meta["minibatch_cases_so_far"] = list(dict.fromkeys(
        k for k in mini_cases if k in MINIBATCH_CASES))
    args.bar_cases = [CASES[k] for k in meta["cases_so_far"]]
    args.bar_minibatch_cases = [MINIBATCH_CASES[k] for k in meta["minibatch_cases_so_far"]]
    return None
