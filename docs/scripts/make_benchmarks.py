"""Benchmark tables and plots for the docs, from the bench CLI's JSON.

Reads every ``docs/results_*.json`` written by ``python -m pyg_ioaware.bench
--out DIR`` (copied into docs/ after a run) and writes, under
docs/_generated/:

- ``benchmarks_generated.md``: the newest figures per case against PyG, then
  one section per run (device, date, versions, command-line arguments; the
  summary, the per-graph ratios, the mini-batch steps, the kernels'
  bandwidth and the targets with their status);
- ``bench_<run>.png``: ours against PyG per graph, one plot per run.

docs/conf.py runs it on every build, so the pages never hold pasted numbers:
add a JSON file to docs/ and rebuild. Runnable alone too:

    python docs/scripts/make_benchmarks.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
from collections import OrderedDict

DOCS = pathlib.Path(__file__).resolve().parents[1]

# What each run in docs/ measured (the file names are those of the runs).
RUN_TITLES = {
    "results_h200": "GCNConv, the first version (issue 2)",
    "results_h200_issue5_full": "GCNConv, one-shot graphs: full suite (issue 5)",
    "results_h200_issue5_minibatch": "GCNConv mini-batch steps (issue 5)",
    "results_h200_issue6_suite": "GCNConv with the SpMM kernels of our own (issue 6)",
    "results_h200_issue6_products_minibatch":
        "GCNConv D=512 on products-like and mini-batch steps (issue 6)",
    "results_h200_issue7_reduction": "min/max aggregation and SAGEConv (issue 7)",
    "results_h200_issue7_reduction_large": "min/max aggregation on the large graphs (issue 7)",
    "results_h200_issue7_sage_minibatch": "SAGEConv mini-batch steps (issue 7)",
    "results_h200_issue8_gatv2": "GATv2Conv, first fused version (issue 8)",
    "results_h200_issue8_gatv2_web": "GATv2Conv on web-like (issue 8)",
    "results_h200_issue8_round2": "GATv2Conv (2, 64) after the kernel rework (issue 9)",
    "results_h200_issue9_transformer": "TransformerConv (4, 128) (issue 9)",
    "results_h200_issue9_large":
        "TransformerConv and GATv2Conv (8, 128) on the large graphs (issue 9)",
    "results_h200_attention_minibatch": "GATv2Conv and TransformerConv mini-batch steps (issue 9)",
    "results_h200_minibatch_all_layers":
        "Mini-batch steps of all four layers, attention graphs built before the projections "
        "(issues 5, 7-9)",
    "results_h200_native_graph_build_minibatch":
        "Mini-batch steps after the native graph build and mean values, 40 steps per median "
        "(issue 5)",
    "results_h200_new_graph_minibatch":
        "Mini-batch steps after prefetch, the native CSR^T and PyG self loops, variants "
        "interleaved (issue 5)",
    "results_h200_grouped_spmm_gcn":
        "GCNConv D=64 and D=512 on the small suite graphs with a sub-group per narrow row "
        "(issue 6)",
    "results_h200_wide_16bit_spmm":
        "GCNConv D=512 in bf16 and fp16 on pokec-like and web-like, wide 16-bit rows in one "
        "pass and pipelined gathers (issue 6)",
    "results_h200_pipelined_gather_minibatch":
        "GCNConv and SAGEConv mini-batch steps with pipelined SpMM gathers (issues 5-7)",
    "results_h200_attention_occupancy_gatv2":
        "GATv2Conv (2, 64) with more warps an SM in the attention kernels (issue 8)",
    "results_h200_attention_occupancy_transformer":
        "TransformerConv (4, 128) with more warps an SM in the attention kernels (issue 9)",
    "results_h200_attention_occupancy_minibatch":
        "GATv2Conv and TransformerConv mini-batch steps, more warps an SM (issues 8, 9)",
    "results_h200_spmm_occupancy_gcn_d64":
        "GCNConv D=64 with 4 blocks an SM in the SpMM kernels; mini-batch steps at 10 "
        "timed steps (issues 5-7)",
    "results_h200_spmm_occupancy_minibatch":
        "GCNConv and SAGEConv mini-batch steps with 4 blocks an SM in the SpMM kernels "
        "(issues 5-7)",
    "results_h200_gemv_bias_gatv2": "GATv2Conv (2, 64) with GEMV bias gradients (issue 8)",
    "results_h200_gemv_bias_transformer_gcn":
        "TransformerConv (4, 128) and GCNConv D=64 with GEMV bias gradients (issues 6, 9)",
    "results_h200_gemv_bias_gcn_suite":
        "GCNConv D=64 and D=512 fp32 on the whole suite with the GEMV bias gradient (issue 6)",
    "results_h200_minmax_rank":
        "min aggregation D=512 with the three-instruction rank, before the one-walk backward "
        "(issue 7)",
    "results_h200_rank_gemv_minibatch":
        "Mini-batch steps of all layers after the min/max rank, one-walk backward and GEMV "
        "bias gradients (issues 5, 7-9)",
    "results_h200_carry_spmm_gcn_fp32":
        "GCNConv D=64 and D=512 fp32 on the whole suite, SpMM rows loading the next row's "
        "first entries (issue 6)",
    "results_h200_carry_spmm_gcn_16bit":
        "GCNConv D=64 and D=512 in bf16 and fp16 on the whole suite, leaner 16-bit SpMM rows "
        "(issue 6)",
    "results_h200_carry_spmm_minibatch":
        "GCNConv and SAGEConv mean mini-batch steps after the SpMM row changes (issues 5-7)",
    "results_h200_widen_spmm_gcn_16bit":
        "GCNConv D=64 and D=512 in bf16 and fp16 on the whole suite, 16-bit SpMM packs widened "
        "from their 32-bit words (issue 6)",
    "results_h200_degree_bound_gcn_suite":
        "GCNConv D=64 and D=512 in fp32, bf16 and fp16 on the whole suite, widened 16-bit "
        "packs and learned degree bounds (issue 6)",
    "results_h200_widen_spmm_minibatch":
        "GCNConv and SAGEConv mean mini-batch steps with the widened 16-bit SpMM packs "
        "(issues 5-7)",
    "results_h100_sage_fold_before_1":
        "GCNConv (no self loops) and SAGEConv mean mini-batch steps, H100 A/B round 1: before "
        "SAGEConv's root term carried lin_l's bias (issues 5, 7)",
    "results_h100_sage_fold_after_1":
        "GCNConv (no self loops) and SAGEConv mean mini-batch steps, H100 A/B round 1: "
        "SAGEConv's root term carries lin_l's bias, one addmm for lin_l (issues 5, 7)",
    "results_h100_sage_fold_before_2":
        "SAGEConv mean and max mini-batch steps, H100 A/B round 2: before the root term "
        "carried lin_l's bias (issue 7)",
    "results_h100_sage_fold_after_2":
        "SAGEConv mean and max mini-batch steps, H100 A/B round 2: the root term carries "
        "lin_l's bias (issue 7)",
    "results_h100_walk32_state_minibatch":
        "GCNConv and SAGEConv (mean, max) mini-batch steps with 32-bit SpMM and min/max entry "
        "positions, H100 (issues 5, 7)",
    "results_h100_walk32_attention":
        "GATv2Conv (2, 64) and TransformerConv (4, 128) layers and mini-batch steps with "
        "32-bit attention walks, H100 (issues 8, 9)",
    "results_h200_packed_state_gcn_small":
        "State on an H200: GCNConv D=64 and D=512 on the small suite graphs, fp32 / bf16 / fp16 "
        "(issue 6)",
    "results_h200_packed_state_gcn_large":
        "State on an H200: GCNConv D=64 and D=512 on pokec-, web- and products-like, fp32 / "
        "bf16 / fp16 (issue 6)",
    "results_h200_packed_state_reduction":
        "State on an H200: min / max aggregation and SAGEConv min at D=512 (issue 7)",
    "results_h200_packed_state_attention":
        "State on an H200: GATv2Conv and TransformerConv with one projection product whose "
        "gradient the kernels write in place (issues 8, 9)",
    "results_h200_packed_state_minibatch":
        "State on an H200: mini-batch steps of all six layer cases (issues 5, 7-9)",
    "results_h200_native_host_minibatch":
        "Every mini-batch layer with the C++ host extension (issue 5)",
    "results_h200_host_allocations_minibatch":
        "Every mini-batch layer after a new graph's launches allocate in C++ (issue 5)",
    "results_h200_attention_launches_minibatch":
        "Every mini-batch layer after the attention launches, CSR^T and PyG self-loop graph "
        "moved to C++ (issues 5, 8, 9)",
    "results_h200_attention_autograd_minibatch":
        "Every mini-batch layer after the attention family's autograd moved to C++ "
        "(issues 5, 8, 9)",
    "results_h200_attention_autograd_suite":
        "GATv2Conv (2, 64) and TransformerConv (4, 128) on arxiv-, pokec- and web-like after "
        "the attention family's autograd moved to C++, H200 (issues 8, 9)",
    "results_h200_hub_items_suite":
        "GATv2Conv (2, 64) and TransformerConv (4, 128) on arxiv-, pokec- and web-like after "
        "few hubs' chunks went to a block each, H200 (issues 8, 9)",
    "results_h200_hub_items_minibatch":
        "Every mini-batch layer after few hubs' chunks went to a block each (issues 5, 7-9)",
    "results_h200_mixed_spmm_minibatch":
        "Every mini-batch layer after GCNConv's autocast messages went to PyG's float32 "
        "(one mixed SpMM) (issues 5, 7-9)",
    "results_h200_one_launch_build_minibatch":
        "Every mini-batch layer after a new graph's build went to one launch (statistics "
        "rows in pinned memory, the grouped CSR in the same pass) (issues 5, 7-9)",
    "results_h200_gcn_aggregate_first_minibatch":
        "GCNConv and SAGEConv mean mini-batch steps after a first GCNConv layer aggregates "
        "before its projection (issues 5, 7)",
    "results_h200_gatv2_out_bias":
        "GATv2Conv (2, 64) with no saved output and its bias in the kernels' output pass, "
        "H200 (issue 8)",
    "results_h200_stats_slots_minibatch":
        "Every mini-batch layer after a new graph's read reused its pinned rows and GCN's "
        "self-loop graph joined the graph's own host call (issues 5, 7-9)",
    "results_h200_minmax_native_minibatch":
        "Every mini-batch layer after the min / max autograd moved to C++ and its backward's "
        "winner atomics to consecutive features (issues 5, 7-9)",
    "results_h200_minmax_native_min512":
        "Min aggregation D=512 against PyG after the min / max autograd moved to C++ and its "
        "backward's winner atomics to consecutive features, H200 (issue 7)",
    "results_h200_transformer_occupancy":
        "TransformerConv (4, 128) on arxiv-, pokec- and web-like after its kernels got more "
        "warps an SM and a 16-bit L2 prefetch, H200 (issue 9)",
    "results_h200_transformer_occupancy_minibatch":
        "TransformerConv mini-batch steps after its kernels got more warps an SM and a "
        "16-bit L2 prefetch (issue 9)",
    "results_h200_mixed_bias_gcn":
        "GCNConv D=64 and D=512 in fp32, bf16 and fp16 after the autocast bias over 16-bit "
        "features went inside the mixed aggregation, ours and the baselines timed in turns, "
        "H200 (issue 6)",
    "results_h200_mixed_bias_minibatch":
        "GCNConv mini-batch steps after the autocast bias over 16-bit features went inside "
        "the mixed aggregation (issue 5)",
    "results_h200_resolved_forward_gcn":
        "GCNConv D=64 and D=512 in fp32, bf16 and fp16 with wide float32 forwards on long "
        "rows on the kernels of our own and the layer's resolved forward, H200 (issue 6)",
    "results_h200_resolved_forward_minibatch":
        "GCNConv mini-batch steps on the same tree (issue 5)",
    "results_h200_new_graph_values_minibatch":
        "GCNConv mini-batch steps after a new graph's GCN values came from its self-loop "
        "build and its Python lost two lookups, H200 (issue 5)",
    "results_h200_autocast_linear_minibatch":
        "Every mini-batch case, fp32 and bf16, after autocast's linear maps became one C++ "
        "node each, H200 (issues 5, 7, 8, 9)",
    "results_h200_autocast_linear_attention":
        "GATv2Conv (2, 64) and TransformerConv (4, 128) on arxiv-like, fp32 and bf16, and "
        "every mini-batch case again, on the same tree, H200 (issues 5, 7, 8, 9)",
    "results_h200_no_edge_path_attention":
        "GATv2Conv (2, 64) and TransformerConv (4, 128) against PyG after the attention "
        "kernels lost their edge path where no edge attributes are given and took "
        "one-instruction softmax exponentials, H200 (issues 8, 9)",
    "results_h200_no_edge_path_minibatch":
        "GATv2Conv and TransformerConv mini-batch steps on the library without the edge "
        "path, H200 (issues 8, 9)",
    "results_h200_one_wave_gatv2":
        "GATv2Conv (2, 64) against PyG after the 16-bit attention backward passes went "
        "to one wave of their own resident blocks, H200 (issue 8)",
    "results_h200_one_wave_minibatch":
        "SAGEConv (max, mean) and GATv2Conv mini-batch steps on the library with one-wave "
        "grids for the fp32 min / max and 16-bit attention backwards, H200 (issues 7, 8)",
    "results_h200_one_wave_min512":
        "Min aggregation D=512 against PyG after the fp32 min / max backward went to one "
        "wave of its own resident blocks, H200 (issue 7)",
    "results_h200_one_wave_min512_before":
        "Min aggregation D=512 against PyG on the tree before the one-wave fp32 backward, "
        "timed in the same call, H200 (issue 7)",
    "results_h200_lane_winners_min512":
        "Min aggregation D=512 against PyG after the forward kept each lane's winners as "
        "values (16-bit pairs packed, fp32 rows two pieces a lane), H200 (issue 7)",
    "results_h200_lane_winners_min512_before":
        "Min aggregation D=512 against PyG on the tree before the lane winners, H200 "
        "(issue 7)",
    "results_h200_hub_chunk_min512":
        "Min aggregation D=512 against PyG after the min / max hub chunks shrank to fill "
        "the GPU on mid-sized graphs, H200 (issue 7)",
    "results_h200_hub_chunk_min512_before":
        "Min aggregation D=512 against PyG (fp32) on the tree before the smaller hub "
        "chunks, on the same machine as the one after them, H200 (issue 7)",
    "results_h200_narrow_arg_min512":
        "Min aggregation D=512 against PyG after the min / max arg went to codes of one or "
        "two bytes (the winner's position in its row), H200 (issue 7)",
    "results_h200_narrow_arg_min512_before":
        "Min aggregation D=512 against PyG on the tree before the narrow arg codes, run in "
        "the same call as the one after them, H200 (issue 7)",
    "results_h200_row_batches_final_gcn":
        "GCNConv D=64 and D=512 in fp32 and bf16 on the final tree of the row-batch stop "
        "(the C++ autograd on large graphs too), H200 (issue 6)",
    "results_h200_row_batches_final_minibatch":
        "GCNConv mini-batch steps on the final tree of the row-batch stop (issue 5)",
    "results_h200_row_batches_gcn":
        "GCNConv D=64 and D=512 in fp32 and bf16 after narrow SpMM rows went in batches "
        "and the backend heuristic followed the new kernel table, H200 (issue 6)",
    "results_h200_row_batches_minibatch":
        "GCNConv mini-batch steps after narrow SpMM rows went in batches and the backend "
        "heuristic followed the new kernel table (issue 5)",
    "results_h200_spmm_16bit_pinned_gcn_d64":
        "GCNConv D=64 in bf16 and fp16 after the 16-bit SpMM rows kept three entries in "
        "flight and their gather's pointers in registers, H200 (issue 6)",
    "results_h200_spmm_16bit_pinned_minibatch":
        "GCNConv mini-batch steps after the 16-bit SpMM rows kept three entries in flight "
        "and their gather's pointers in registers (issue 5)",
    "results_h200_fused_linear_attention":
        "GATv2Conv (2, 64) and TransformerConv (4, 128) on arxiv-, pokec- and web-like after "
        "the attention layers' fused projections became one C++ autograd node, H200 "
        "(issues 8, 9)",
    "results_h200_landed_attention_arxiv":
        "GATv2Conv (2, 64) and TransformerConv (4, 128) on arxiv-like, the landed tree (the "
        "baseline of a tried change to the fused projections), H200 (issues 8, 9)",
    "results_h200_winners_kernel_min512":
        "min aggregation D=512 on every suite graph and SAGEConv max mini-batch steps after the "
        "float32 backward's winners kernel, H200 (issue 7)",
    "results_h200_rows_kernel_again_run1":
        "min aggregation D=512 and the mini-batch steps of GCNConv and SAGEConv after the "
        "winners kernel was dropped, run 1, H200 (issues 5, 7)",
    "results_h200_rows_kernel_again_run2":
        "min aggregation D=512 and the mini-batch steps of GCNConv and SAGEConv after the "
        "winners kernel was dropped, run 2, H200 (issues 5, 7)",
    "results_h200_masked_shares_run1":
        "min aggregation D=512 and the mini-batch steps (small, medium, large) of GCNConv and "
        "SAGEConv on the library with the vector walk shares, run 1, H200 (issues 5, 7)",
    "results_h200_relu_cases_run2":
        "min aggregation D=512 on normal and ReLU features, max on ReLU features, and the "
        "mini-batch steps, run 2, H200 (issues 5, 7)",
    "results_h200_repeat_min512":
        "min aggregation D=512 on normal and ReLU features, the min / max backward without its "
        "unused 8-wide kernels, H200 (issue 7)",
    "results_h200_repeat_minibatch_runA":
        "mini-batch steps of GCNConv and SAGEConv, run A of three on one host, H200 "
        "(issues 5, 7)",
    "results_h200_repeat_minibatch_runB":
        "mini-batch steps of GCNConv and SAGEConv, run B of three on one host, H200 "
        "(issues 5, 7)",
    "results_h200_repeat_minibatch_runC":
        "mini-batch steps of GCNConv and SAGEConv, run C of three on one host, H200 "
        "(issues 5, 7)",
    "results_h200_untimed_memo_runA":
        "mini-batch steps of GCNConv with the tuner's answers remembered per class, run A of "
        "three on one host, 100 steps a variant, H200 (issue 5)",
    "results_h200_untimed_memo_runB":
        "mini-batch steps of GCNConv with the tuner's answers remembered per class, run B of "
        "three on one host, 100 steps a variant, H200 (issue 5)",
    "results_h200_untimed_memo_runC":
        "mini-batch steps of GCNConv with the tuner's answers remembered per class, run C of "
        "three on one host, 100 steps a variant, H200 (issue 5)",
    "results_h200_fused_loops_runA":
        "mini-batch steps of GCNConv with the self-loop graph built in one launch, run A of "
        "three on one host, 100 steps a variant, H200 (issue 5)",
    "results_h200_fused_loops_runB":
        "mini-batch steps of GCNConv with the self-loop graph built in one launch, run B of "
        "three on one host, 100 steps a variant, H200 (issue 5)",
    "results_h200_fused_loops_runC":
        "mini-batch steps of GCNConv with the self-loop graph built in one launch, run C of "
        "three on one host, 100 steps a variant, H200 (issue 5)",
}


def fmt(value, unit: str = "x") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{100 * value:.0f}%"
    if unit == "ms":
        return f"{value:.2f}"
    return f"{value:.3g}"


def table(header, rows) -> list:
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")
    return out + [""]


def load_runs(docs: pathlib.Path) -> list:
    runs = []
    for path in sorted(docs.glob("results_*.json")):
        data = json.loads(path.read_text())
        if "meta" not in data:
            continue
        runs.append((path, data))
    runs.sort(key=lambda r: r[1]["meta"].get("date", ""), reverse=True)
    return runs


def meta_lines(path: pathlib.Path, meta: dict) -> list:
    args = meta.get("args", {})
    date = meta.get("date", "?").replace("T", " ")[:16] + " UTC"
    lines = [f"- device: **{meta.get('device_name', meta.get('device', '?'))}**, "
             f"measured {date}",
             f"- torch {meta.get('torch', '?')}, torch_geometric "
             f"{meta.get('torch_geometric', '?')}, pyg_ioaware {meta.get('pyg_ioaware', '?')}, "
             f"native library {'loaded' if meta.get('native_library') else 'not loaded'}"]
    what = []
    if args.get("cases"):
        what.append("cases " + ", ".join(args["cases"]))
    if args.get("graphs"):
        what.append("graphs " + ", ".join(args["graphs"]))
    if args.get("minibatch"):
        what.append("mini-batches " + ", ".join(args["minibatch"]))
    if args.get("dtypes"):
        what.append("dtypes " + ", ".join(args["dtypes"]))
    if "iters" in args:
        what.append(f"{args['iters']} timed iterations after {args.get('warmup', '?')} warm-up")
    lines.append("- " + "; ".join(what))
    lines.append(f"- raw data: {{download}}`{path.name} </{path.name}>`")
    deviations = meta.get("protocol_deviations") or []
    for dev in deviations:
        lines.append(f"- deviation from the protocol: {dev}")
    return lines + [""]


def plot_run(name: str, data: dict, out_dir: pathlib.Path):
    """Speedup and memory ratio against PyG per graph; None if nothing to plot."""
    comps = [c for c in data.get("comparisons", [])
             if c.get("baseline") == "pyg" and c.get("status") == "ok"]
    if not comps:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{c['graph']}\n{c['case']}\n{c['precision']}" for c in comps]
    metrics = (("fwd_speedup", "forward speedup"), ("bwd_speedup", "backward speedup"),
               ("mem_ratio", "peak memory ratio"))
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(comps) + 2), 4.2))
    for k, (key, label) in enumerate(metrics):
        xs = [i + (k - 1) * width for i in range(len(comps))]
        ax.bar(xs, [c.get(key) or float("nan") for c in comps], width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("PyG / ours (higher is better)")
    ax.set_xticks(range(len(comps)))
    ax.set_xticklabels(labels, fontsize=6.5, rotation=0)
    meta = data["meta"]
    ax.set_title(f"{RUN_TITLES.get(name, name)}\n{meta.get('device_name', '?')}, "
                 f"{meta.get('date', '?')[:10]}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / f"bench_{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_section(path: pathlib.Path, data: dict, out_dir: pathlib.Path) -> list:
    name = path.stem
    meta = data["meta"]
    lines = [f"### {RUN_TITLES.get(name, name)}", ""] + meta_lines(path, meta)

    summary = data.get("summary") or []
    if summary:
        lines += ["Geometric mean over the graphs where both ran (a ratio above 1 is ours "
                  "faster, or smaller):", ""]
        rows = []
        for s in summary:
            not_run = ", ".join(f"{g}: {why}" for g, why in (s.get("not_run") or {}).items())
            rows.append([s["case"], s["precision"], s["baseline"], len(s.get("graphs", [])),
                         fmt(s.get("fwd_speedup")), fmt(s.get("bwd_speedup")),
                         fmt(s.get("mem_ratio")), not_run or "-"])
        lines += table(["case", "dtype", "against", "graphs", "forward", "backward",
                        "peak memory", "baseline not run"], rows)

    comps = data.get("comparisons") or []
    if comps:
        rows = [[c["graph"], c["case"], c["precision"], c["baseline"],
                 fmt(c.get("fwd_speedup")) if c.get("status") == "ok" else c.get("status"),
                 fmt(c.get("bwd_speedup")) if c.get("status") == "ok" else "-",
                 fmt(c.get("mem_ratio")) if c.get("status") == "ok" else "-"]
                for c in comps]
        lines += ["Per graph (baseline time / our time; baseline peak memory / ours):", ""]
        lines += table(["graph", "case", "dtype", "against", "forward", "backward",
                        "peak memory"], rows)

    results = [r for r in data.get("results") or [] if r.get("impl") == "ours"]
    if results:
        rows = [[r["graph"], r["case"], r["precision"],
                 fmt(r.get("fwd_ms"), "ms") if r.get("status") == "ok" else r.get("status"),
                 fmt(r.get("bwd_ms"), "ms") if r.get("status") == "ok" else "-",
                 f"{r['peak_fwd_bwd_mb']:.0f}" if r.get("peak_fwd_bwd_mb") else "-"]
                for r in results]
        lines += ["Our absolute figures (median ms; peak MB over forward + backward):", ""]
        lines += table(["graph", "case", "dtype", "forward ms", "backward ms", "peak MB"], rows)

    mb = (data.get("minibatch") or {}).get("comparisons") or []
    if mb:
        rows = [[c["batch"], c["case"], c["precision"], fmt(c.get("ours_ms"), "ms"),
                 fmt(c.get("pyg_ms"), "ms"), fmt(c.get("pyg_over_ours")),
                 fmt(c.get("same_graph_ms"), "ms"), fmt(c.get("new_over_same_graph"))]
                for c in mb]
        lines += ["Mini-batch training step (a new `edge_index` every step), ms:", ""]
        lines += table(["batch", "layer", "dtype", "ours", "PyG", "PyG / ours",
                        "ours, graph reused", "new / reused graph"], rows)

    bw = (data.get("kernel_bandwidth") or {}).get("rows") or []
    bw = [r for r in bw if r.get("status") == "ok"]
    if bw:
        copy = data["kernel_bandwidth"].get("copy_gbs")
        lines += [f"Kernels alone: effective bandwidth under the minimal-bytes model "
                  f"(device copy bandwidth {copy:.0f} GB/s):", ""]
        rows = [[r["graph"], r["case"], r["precision"], r["kernel"], fmt(r.get("ms"), "ms"),
                 f"{r['gbs']:.0f}", fmt(r.get("share_of_copy"), "%")] for r in bw]
        lines += table(["graph", "case", "dtype", "kernel", "ms", "GB/s", "share of copy"], rows)

    bars = [b for b in data.get("bars") or [] if b.get("status") != "n/a"]
    if bars:
        lines += ["Targets of the {ref}`benchmark protocol <benchmark-protocol-targets>` this run "
                  "checked:", ""]
        rows = []
        for b in bars:
            unit = b.get("unit", "x")
            cmp = ">=" if b.get("better", "higher") == "higher" else "<="
            value = b.get("value")
            shown = "-" if value is None else (f"{value:.3g}" if unit != "x" else fmt(value))
            rows.append([b["check"], shown, f"{cmp} {b['bar']}", b["status"],
                         b.get("detail") or ""])
        lines += table(["check", "value", "target", "status", "detail"], rows)

    plot = plot_run(name, data, out_dir)
    if plot is not None:
        lines += [f"```{{image}} /_generated/{plot.name}",
                  f":alt: {RUN_TITLES.get(name, name)}: ours against PyG per graph",
                  "```", ""]
    return lines


def headline(runs) -> list:
    """Per (case, dtype) against PyG: the newest run where PyG's layer ran on
    at least one graph, with the graphs where PyG did not run in that run or
    any newer one (a run of only the largest graphs has PyG out of memory
    everywhere and gives no ratio)."""
    chosen, not_run = OrderedDict(), {}
    for path, data in runs:  # newest first
        for s in data.get("summary") or []:
            if s.get("baseline") != "pyg":
                continue
            key = (s["case"], s["precision"])
            if key in chosen:
                continue
            not_run.setdefault(key, {}).update(s.get("not_run") or {})
            if s.get("graphs"):
                chosen[key] = (s, data["meta"])
    rows = []
    for key in sorted(set(chosen) | set(not_run)):
        case, precision = key
        missing = ", ".join(f"{g}: {w}" for g, w in sorted(not_run.get(key, {}).items()))
        if key not in chosen:
            rows.append([case, precision, "-", "-", "-", 0, missing or "-", "-"])
            continue
        s, meta = chosen[key]
        rows.append([case, precision, fmt(s.get("fwd_speedup")), fmt(s.get("bwd_speedup")),
                     fmt(s.get("mem_ratio")), len(s.get("graphs", [])), missing or "-",
                     f"{meta.get('device_name', '?')}, {meta.get('date', '?')[:10]}"])
    lines = ["Ours against PyG's layer, geometric mean over the suite graphs where PyG "
             "ran, from the newest run that compared each case (above 1: ours faster, "
             "or smaller). Where PyG ran out of memory the graph is left out of the mean "
             "and listed.", ""]
    return lines + table(["case", "dtype", "forward", "backward", "peak memory (fwd+bwd)",
                          "graphs", "PyG not run", "device, date"], rows)


def generate(out_dir: pathlib.Path, docs: pathlib.Path = DOCS) -> pathlib.Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = load_runs(docs)
    lines = ["<!-- Generated by docs/scripts/make_benchmarks.py from docs/results_*.json; "
             "do not edit. -->", "", "## Newest figures per case", ""]
    lines += headline(runs)
    lines += ["## Every run, newest first", ""]
    for path, data in runs:
        lines += run_section(path, data, out_dir)
    target = out_dir / "benchmarks_generated.md"
    target.write_text("\n".join(lines) + "\n")
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=DOCS / "_generated",
                        help="output folder (default: docs/_generated)")
    args = parser.parse_args(argv)
    print(f"make_benchmarks: wrote {generate(args.out)}")
    return 0


if __name__ == "__main__":
    main()
