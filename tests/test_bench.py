"""The benchmark CLI on CPU: graph and mini-batch generators, the
measurement, the bar checks, tiny runs of the CLI."""
import argparse
import dataclasses
import json

import pytest
import torch

from pyg_ioaware.bench import cases, graphs, minibatch, timing
from pyg_ioaware.bench.cli import CPU_SCALE, _default_sizes, main, parse_args
from pyg_ioaware.bench.report import check_bars, minibatch_comparisons
from pyg_ioaware.bench.timing import measure

SCALE = 0.002


@pytest.mark.parametrize("name", list(graphs.SUITE))
def test_generator_gives_a_valid_graph(name):
    edge_index, num_nodes = graphs.generate(name, SCALE)
    expected_nodes, target_edges = graphs.scaled_size(name, SCALE)
    assert num_nodes == expected_nodes
    assert edge_index.dtype == torch.int64
    assert edge_index.dim() == 2 and edge_index.size(0) == 2
    assert 0 < edge_index.size(1) <= target_edges
    assert int(edge_index.min()) >= 0 and int(edge_index.max()) < num_nodes
    src, dst = edge_index
    assert not bool((src == dst).any()), "self loop"
    assert (src * num_nodes + dst).unique().numel() == edge_index.size(1), "duplicate edge"


@pytest.mark.parametrize("name", ["arxiv-like", "roads-like", "tolokers-like"])
def test_generator_is_deterministic(name):
    first, n1 = graphs.generate(name, SCALE, seed=3)
    again, n2 = graphs.generate(name, SCALE, seed=3)
    other, _ = graphs.generate(name, SCALE, seed=4)
    assert n1 == n2 and torch.equal(first, again)
    assert first.shape != other.shape or not torch.equal(first, other)


def test_generators_have_the_suite_degree_shapes():
    edge_index, n = graphs.generate("arxiv-like", 0.02)
    in_degree = torch.bincount(edge_index[1], minlength=n).float()
    assert edge_index.size(1) == graphs.scaled_size("arxiv-like", 0.02)[1]
    assert in_degree.max() > 10 * in_degree.mean()  # heavy tail

    edge_index, n = graphs.generate("roads-like")  # full size: 377 x 377 grid
    in_degree = torch.bincount(edge_index[1], minlength=n).float()
    assert n == 142_129 and int(in_degree.max()) <= 4
    assert abs(in_degree.mean().item() - 1.96) < 0.05


def test_measure_records_oom_instead_of_raising():
    x = torch.randn(4, 3, requires_grad=True)

    def step(_):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 5 GiB. "
                                          "GPU 0 has a total capacity of 79 GiB")

    m = measure(step, x, [], "fp32", iters=2, warmup=1)
    assert m.status == "OOM" and m.fwd_ms is None
    assert m.detail == "CUDA out of memory. Tried to allocate 5 GiB."


def test_layer_timings_take_turns_and_go_on_past_an_oom():
    """Ours and the baselines run their warm-ups, then rounds in turn; one
    that runs out of memory gets status "OOM" and the others go on."""
    order = []

    def step_of(name, error=None):
        def step(x):
            order.append(name)
            if error is not None and order.count(name) > 1:
                raise error
            return x * 2
        return step

    oom = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 5 GiB. GPU 0 ...")
    x = torch.randn(5, 3, requires_grad=True)
    timers = {name: timing.LayerTimer(step_of(name, error), x, [], "fp32")
              for name, error in (("ours", None), ("big", oom), ("pyg", None))}
    results = timing.measure_interleaved(timers, iters=4, warmup=1, rounds=2,
                                         failed=lambda _, error: timing.out_of_memory(error))
    assert order == ["ours", "big", "pyg", "ours", "ours", "big", "pyg", "pyg",
                     "ours", "ours", "pyg", "pyg"]
    assert results["big"].status == "OOM" and results["big"].fwd_ms is None
    assert results["big"].detail == "CUDA out of memory. Tried to allocate 5 GiB."
    assert all(results[name].status == "ok" and results[name].fwd_ms >= 0
               for name in ("ours", "pyg"))
    assert x.grad is None  # cleared after the last iteration


def test_torch_sparse_baseline_computes_pyg_gcn():
    from torch_geometric.nn import GCNConv

    torch.manual_seed(0)
    edge_index, n = graphs.generate("arxiv-like", SCALE)
    pyg = GCNConv(16, 16)
    with torch.no_grad():
        pyg.bias.normal_()
    work = cases.Workload(edge_index, n, "fp32")
    sparse = cases.CASES["gcn-d64"].baselines["torch.sparse"](work, cases.Impl(pyg, pyg))
    x = torch.randn(n, 16)
    torch.testing.assert_close(sparse.step(x), pyg(x, edge_index), atol=1e-5, rtol=1e-4)


def test_cli_runs_one_graph_and_writes_every_figure(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["--graphs", "arxiv-like", "--cases", "gcn-d64", "--dtypes", "fp32",
                 "--iters", "2", "--warmup", "1", "--scale", str(SCALE), "--device", "cpu",
                 "--minibatch", "none", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())

    for key in ("device", "device_name", "torch", "torch_geometric", "pyg_ioaware", "date"):
        assert data["meta"][key]
    graph = data["graphs"]["arxiv-like"]
    assert graph["num_nodes"] == graphs.scaled_size("arxiv-like", SCALE)[0]
    assert graph["num_edges"] > 0 and graph["build_ms"] > 0 and graph["graph_mb"] > 0

    rows = data["results"]
    assert [r["impl"] for r in rows] == ["ours", "pyg", "torch.sparse"]
    for row in rows:
        assert (row["graph"], row["case"], row["precision"]) == ("arxiv-like", "GCNConv D=64",
                                                                 "fp32")
        assert row["status"] == "ok"
        assert row["fwd_ms"] > 0 and row["bwd_ms"] > 0
        assert row["peak_fwd_mb"] is None and row["peak_fwd_bwd_mb"] is None  # n/a on CPU
    assert {c["baseline"] for c in data["comparisons"]} == {"pyg", "torch.sparse"}
    assert all(c["fwd_speedup"] > 0 and c["bwd_speedup"] > 0 for c in data["comparisons"])
    assert [s["graphs"] for s in data["summary"]] == [["arxiv-like"], ["arxiv-like"]]
    assert any(c["check"].startswith("ours runs on every graph") and c["status"] == "met"
               for c in data["bars"])
    assert data["meta"]["protocol_deviations"]  # CPU, scaled, 2 iterations

    bandwidth = data["kernel_bandwidth"]
    assert bandwidth["copy_gbs"] > 0
    kernels = bandwidth["rows"]
    assert [k["kernel"] for k in kernels] == [
        "torch A X", "torch A^T G (CSR^T)", "torch A^T G (transposed)", "torch.sparse A X",
        "torch.sparse A^T G"]  # per backend of ours (CPU: plain torch), then torch.sparse
    # The GCN graph gains one self loop per node: nnz = E + N; outputs N rows of D=64 fp32.
    n = graph["num_nodes"]
    assert all(k["min_bytes"] == (graph["num_edges"] + n + n) * 64 * 4 for k in kernels)
    for k in kernels:
        assert k["status"] == "ok" and k["ms"] > 0
        assert k["gbs"] == pytest.approx(k["min_bytes"] / (k["ms"] * 1e-3) / 1e9)
        assert k["share_of_copy"] == pytest.approx(k["gbs"] / bandwidth["copy_gbs"])

    printed = capsys.readouterr().out
    assert printed.index("Summary:") > printed.index("MB fwd+bwd")  # summary after the table
    # The bar, then the kernels' bandwidth table close the output.
    assert (printed.index("Aggregation kernels alone")
            > printed.index("The bar (docs/benchmark_protocol.md)"))
    assert printed.rstrip().splitlines()[-1].startswith("arxiv-like")
    pytest.importorskip("matplotlib")
    assert (out / "results.png").stat().st_size > 0


def test_cli_rejects_unknown_names():
    for bad in (["--graphs", "no-such-graph"], ["--cases", "no-such-case"],
                ["--minibatch", "huge"], ["--minibatch-cases", "no-such-layer"]):
        with pytest.raises(SystemExit):
            main([*bad, "--device", "cpu"])


# ------------------------------------------------------------------ --scale

def test_scale_multiplies_node_and_edge_counts(capsys):
    for name, spec in graphs.SUITE.items():
        nodes, edges = graphs.scaled_size(name, 0.1)
        assert edges == round(spec.num_edges * 0.1)  # a tenth
        if not spec.square:
            assert nodes == round(spec.num_nodes * 0.1)
        assert abs(nodes - spec.num_nodes * 0.1) < 0.01 * spec.num_nodes
    assert graphs.scaled_size("arxiv-like", 2.0) == (2 * 169_343, 2 * 1_166_243)
    assert minibatch.scaled_seeds(minibatch.SIZES["medium"], 0.1) == round(1024 * 0.1)
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--scale SCALE multiplier on every graph's node and edge counts" in help_text
    assert "0.1 = a tenth" in help_text and "shrink" not in help_text


def test_cpu_defaults_unless_sizes_are_given():
    args = parse_args(["--device", "cpu"])
    assert args.scale == CPU_SCALE and args.graphs == list(graphs.QUICK)
    assert args.iters < 15 and args.minibatch == ["small"] and args.dtypes == ["fp32"]
    args = parse_args(["--device", "cpu", "--scale", "0.5", "--graphs", "web-like",
                       "--iters", "7", "--minibatch", "none", "--dtypes", "fp32,bf16"])
    assert (args.scale, args.graphs, args.iters, args.minibatch, args.dtypes) == (
        0.5, ["web-like"], 7, [], ["fp32", "bf16"])
    assert args.cpu_sized == []
    gpu = argparse.Namespace(device=torch.device("cuda"), scale=None, graphs=None, iters=None,
                             warmup=None, minibatch=None, dtypes=None, quick=False)
    _default_sizes(gpu)  # what a GPU gets: the protocol's sizes, fp32 and bf16
    assert (gpu.scale, gpu.dtypes, gpu.cpu_sized) == (1.0, "fp32,bf16", [])


# -------------------------------------------------------------- mini-batches

def test_minibatch_generator_gives_sampled_subgraphs():
    size = minibatch.SIZES["medium"]  # 1024 seeds, fanouts [15, 10], D=128
    batches = minibatch.generate_batches(size, scale=0.1, count=2, seed=1)
    seeds = round(1024 * 0.1)
    for batch in batches:
        src, dst = batch.edge_index
        n = batch.num_nodes
        assert batch.edge_index.dtype == torch.int64 and batch.num_seeds == seeds
        assert int(src.min()) >= 0 and int(src.max()) < n
        assert int(dst.min()) == 0 and int(dst.max()) < n
        assert bool((dst.diff() >= 0).all()), "edges grouped by increasing destination"
        assert not bool((src == dst).any()), "self loop"
        # Seeds first: the first hop samples 15 neighbours for each seed 0..seeds-1.
        hop1 = seeds * 15
        assert torch.equal(dst[:hop1], torch.arange(seeds).repeat_interleave(15))
        # Every other node is a sampled neighbour, numbered in order of first
        # appearance after the seeds.
        first = torch.full((n,), src.numel()).scatter_reduce(
            0, src, torch.arange(src.numel()), "amin")[seeds:]
        assert int(first.max()) < src.numel() and bool((first.diff() > 0).all())
        # About 30% of sampled neighbours were already in the batch.
        old_share = 1 - (n - seeds) / src.numel()
        assert 0.25 < old_share < 0.35
        # The second hop expands exactly the nodes the first one discovered.
        new1 = int((src[:hop1] >= seeds).sum())
        assert src.numel() == hop1 + 10 * new1
        assert src.numel() == pytest.approx(seeds * 15 * (1 + 0.7 * 10), rel=0.05)
        assert batch.x.shape == (n, 128) and not batch.x.requires_grad
        assert batch.y.shape == (seeds,) and int(batch.y.max()) < minibatch.NUM_CLASSES
    again = minibatch.generate_batches(size, scale=0.1, count=2, seed=1)
    assert all(torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
               for a, b in zip(batches, again))
    assert not torch.equal(batches[0].edge_index[:, :100], batches[1].edge_index[:, :100])


def test_interleaved_step_timing_takes_turns_and_goes_on_past_a_failure():
    calls = []

    class FakeTimer:
        batches = [0, 1]

        def __init__(self, name):
            self.name = name

        def run(self, steps, record=True):
            calls.append((self.name, steps, record))
            if self.name == "bad" and record:
                raise RuntimeError("boom")

        def finish(self):
            return {"a": 1.5, "b": 2.5}[self.name]

    timers = {name: FakeTimer(name) for name in ("a", "bad", "b")}
    results = minibatch.time_interleaved(timers, iters=5, warmup=1, rounds=3)
    assert list(results) == ["a", "bad", "b"]
    assert results["a"] == {"status": "ok", "step_ms": 1.5}
    assert results["b"] == {"status": "ok", "step_ms": 2.5}
    assert results["bad"]["status"] == "error" and "boom" in results["bad"]["detail"]
    # Warm-ups first (at least a pass over the batches), then rounds in turn.
    assert calls[:3] == [("a", 2, False), ("bad", 2, False), ("b", 2, False)]
    assert calls[3:] == [("a", 2, True), ("bad", 2, True), ("b", 2, True),
                         ("a", 2, True), ("b", 2, True), ("a", 2, True), ("b", 2, True)]


def test_minibatch_bars_and_ratios():
    def row(impl, ms, status="ok"):
        return {"batch": "small", "case": "GCNConv", "precision": "fp32", "impl": impl,
                "step_ms": ms if status == "ok" else None, "status": status}

    rows = [row("ours", 2.2), row("pyg", 4.4), row("ours-same-graph", 2.0)]
    (comp,) = minibatch_comparisons(rows)
    assert comp["status"] == "ok"
    assert comp["pyg_over_ours"] == pytest.approx(2.0)
    assert comp["new_over_same_graph"] == pytest.approx(1.1)
    case = cases.MINIBATCH_CASES["gcn"]
    checks = {c["check"]: c for c in check_bars([], [], rows, [case])}
    speed = checks["GCNConv fp32 mini-batch: slowest-batch step speedup vs pyg"]
    new = checks["GCNConv fp32 mini-batch: new graph / same graph step, worst batch"]
    assert (speed["status"], speed["better"], speed["bar"]) == ("met", "higher", 1.3)
    assert (new["status"], new["better"], new["bar"]) == ("met", "lower", 1.15)

    rows = [row("ours", 2.4), row("pyg", None, "OOM"), row("ours-same-graph", 2.0)]
    (comp,) = minibatch_comparisons(rows)
    assert comp["status"] == "pyg: OOM" and comp["pyg_over_ours"] is None
    checks = {c["check"]: c for c in check_bars([], [], rows, [case])}
    assert checks["GCNConv fp32 mini-batch: slowest-batch step speedup vs pyg"]["status"] == "n/a"
    assert checks["GCNConv fp32 mini-batch: new graph / same graph step, worst batch"][
        "status"] == "NOT met"  # 1.2 > 1.15


def test_cli_minibatch_on_cpu_prints_the_notice_first_and_writes_every_figure(tmp_path,
                                                                              capsys):
    if torch.cuda.is_available():
        pytest.skip("the CPU-sized suite runs where no GPU is visible")
    out = tmp_path / "bench"
    assert main(["--cases", "none", "--minibatch-cases", "gcn", "--dtypes", "fp32,bf16",
                 "--iters", "2", "--warmup", "0", "--out", str(out)]) == 0  # CPU, CPU sizes
    printed = capsys.readouterr().out
    first = printed.splitlines()[0]
    assert first.startswith("No CUDA GPU is visible: running a CPU-sized suite")
    assert "mini-batch small" in first and f"scaled by {CPU_SCALE}" in first

    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["args"]["minibatch"] == ["small"]
    assert data["results"] == [] and data["graphs"] == {}
    mini = data["minibatch"]
    batch = mini["batches"]["small"]
    assert batch["seeds"] == minibatch.scaled_seeds(minibatch.SIZES["small"], CPU_SCALE)
    assert batch["fanouts"] == [10, 5] and batch["D"] == 64 and batch["batches"] == 8
    assert batch["num_nodes"] > batch["seeds"] and batch["num_edges"] > 0
    assert batch["build_ms"] > 0 and batch["graph_mb"] > 0 and batch["generate_ms"] > 0
    names = ["GCNConv"]
    assert list(batch["first_call"]) == names
    for call in batch["first_call"].values():
        assert call["status"] == "ok" and call["first_call_ms"] > 0 and call["repeat_call_ms"] > 0

    results = mini["results"]
    assert [(r["case"], r["precision"], r["impl"]) for r in results] == [
        (name, precision, impl) for name in names for precision in ("fp32", "bf16")
        for impl in ("ours", "pyg", "ours-same-graph")]
    assert all(r["status"] == "ok" and r["step_ms"] > 0 and r["batch"] == "small"
               for r in results)
    assert len(mini["comparisons"]) == 2 * len(names)
    for comp in mini["comparisons"]:
        assert comp["pyg_over_ours"] > 0 and comp["new_over_same_graph"] > 0
    bars = {c["check"]: c for c in data["bars"]}
    for name in names:
        for precision in ("fp32", "bf16"):
            assert bars[f"{name} {precision} mini-batch: slowest-batch step speedup vs pyg"][
                "status"] in ("met", "NOT met")
    assert bars["ours runs every mini-batch step (no OOM, no error)"]["status"] == "met"

    assert "Training step, ms" in printed and "Mini-batch training step: PyG / ours" in printed
    assert (out / "summary.txt").read_text().startswith("Summary:")
    pytest.importorskip("matplotlib")
    assert (out / "results.png").stat().st_size > 0


# ------------------------------------------------------- reduction family

def _has_nn(*names):
    import pyg_ioaware.nn

    return all(hasattr(pyg_ioaware.nn, name) for name in names)


def test_reduction_cases_are_registered():
    layer = cases.select("reduction")
    assert [c.key for c in layer] == ["min64", "min512", "max64", "max512", "min512-relu",
                                      "max512-relu", "sage-min512"]
    for case in layer[:4]:
        assert list(case.baselines) == ["pyg"] and case.family == "reduction"
        assert case.bf16_over_fp32 == cases.BF16_OVER_FP32 and case.make_kernels is not None
    for case in layer[4:6]:
        assert list(case.baselines) == ["pyg"] and case.features == "relu"
        assert case.make_kernels is not None and case.bf16_over_fp32 is None
    assert all(case.features == "normal" for case in layer[:4] + layer[6:])
    assert cases.CASES["min512"].bar == cases.Bar(fwd=5.0, bwd=40.0, mem=20.0)
    assert all(cases.CASES[k].bar is None
               for k in ("min64", "max64", "max512", "min512-relu", "max512-relu",
                         "sage-min512"))
    assert list(cases.CASES["sage-min512"].baselines) == ["pyg-sage"]
    mini = cases.select("reduction", cases.MINIBATCH_CASES)
    assert [(c.key, c.name) for c in mini] == [("sage-mean", "SAGEConv mean"),
                                               ("sage-max", "SAGEConv max")]


def test_input_features_follow_the_case():
    normal, relu = cases.CASES["min512"], cases.CASES["min512-relu"]
    torch.manual_seed(0)
    x = cases.input_features(normal, 1000, torch.device("cpu"), torch.float32)
    assert x.shape == (1000, 512) and x.is_leaf and x.requires_grad
    assert bool((x < 0).any())
    torch.manual_seed(0)
    r = cases.input_features(relu, 1000, torch.device("cpu"), torch.bfloat16)
    assert r.dtype == torch.bfloat16 and r.is_leaf and r.requires_grad
    assert bool((r >= 0).all()) and 0.4 < float((r == 0).float().mean()) < 0.6
    odd = dataclasses.replace(normal, features="uniform")
    with pytest.raises(ValueError, match="features must be one of"):
        cases.input_features(odd, 10, torch.device("cpu"), torch.float32)


@pytest.mark.parametrize("reduce", ["min", "max"])
def test_pyg_aggregation_baseline_matches_our_op(reduce):
    from torch import nn

    from pyg_ioaware.ops import aggregate

    torch.manual_seed(0)
    edge_index, n = graphs.generate("arxiv-like", SCALE)
    work = cases.Workload(edge_index, n, "fp32")
    pyg = cases.CASES[f"{reduce}64"].baselines["pyg"](work, cases.Impl(nn.Identity(), None))
    x = torch.randn(n, 8, requires_grad=True)
    torch.testing.assert_close(pyg.step(x), aggregate(x, edge_index, reduce))
    assert int(torch.bincount(edge_index[1], minlength=n).eq(0).sum()) > 0  # empty rows: 0


def test_reduction_bytes_models_and_hub_split():
    from pyg_ioaware import Graph
    from pyg_ioaware.bench.cases import reduce

    # fp32, D=64: forward reads a row per edge and writes a row per output (+ the arg
    # codes, 1 or 2 bytes); backward reads grad_out and arg per output element and
    # writes grad_x.
    assert reduce.forward_bytes(100, 10, 64, 4, 0) == 110 * 64 * 4
    assert reduce.forward_bytes(100, 10, 64, 4, 1) == 110 * 64 * 4 + 10 * 64 * 1
    assert reduce.backward_bytes(20, 10, 64, 2, 2) == 10 * 64 * (2 + 2) + 20 * 64 * 2

    # 1000 nodes: node 0 has 600 in-edges, every other node one. A structure this
    # small takes no quantile (degree 0), so the hub degree is MIN_HUB_DEGREE (256):
    # one hub row.
    n = 1000
    src = torch.cat([torch.arange(1, 601), torch.arange(2, n + 1) % n])
    dst = torch.cat([torch.zeros(600, dtype=torch.long), torch.arange(1, n)])
    graph = Graph.from_input(torch.stack([src, dst]), num_nodes=n)
    split = reduce.hub_split(graph, 0.99)
    assert split == {"quantile": 0.99, "quantile_degree": 0, "threshold": 256,
                     "max_degree": 600, "hub_rows": 1, "hub_row_share": 1 / n,
                     "hub_edges": 600, "hub_edge_share": 600 / 1599, "used": False}
    ring = Graph.from_input(torch.stack([torch.arange(n), torch.arange(1, n + 1) % n]),
                            num_nodes=n)
    split = reduce.hub_split(ring, 0.99)  # degree 1 everywhere: no row above 256
    assert (split["threshold"], split["hub_rows"], split["hub_edges"]) == (256, 0, 0)
    small = Graph.from_input(torch.stack([torch.arange(200), torch.arange(1, 201) % 200]),
                             num_nodes=200)
    split = reduce.hub_split(small, 0.99)  # too few edges for any hub (256 + 1 each)
    assert (split["threshold"], split["hub_rows"], split["hub_edges"]) == (None, 0, 0)


def test_cli_runs_the_reduction_cases(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["--graphs", "arxiv-like", "--cases", "reduction", "--dtypes", "fp32,bf16",
                 "--iters", "2", "--warmup", "1", "--scale", str(SCALE), "--device", "cpu",
                 "--minibatch", "none", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    graph = data["graphs"]["arxiv-like"]
    n, nnz = graph["num_nodes"], graph["num_edges"]

    rows = data["results"]
    plain = [f"{r} aggregation D={d}" for r in ("min", "max") for d in (64, 512)]
    names = plain + [f"{r} aggregation D=512, ReLU features" for r in ("min", "max")]
    expected = [(name, p, impl) for name in names for p in ("fp32", "bf16")
                for impl in ("ours", "pyg")]
    expected += [("SAGEConv min D=512", p, impl) for p in ("fp32", "bf16")
                 for impl in ("ours", "pyg-sage")]
    assert [(r["case"], r["precision"], r["impl"]) for r in rows] == expected
    assert all(r["family"] == "reduction" for r in rows)
    for row in rows:
        if row["impl"] == "pyg":  # pyg-sage needs our SAGEConv's weights
            assert row["status"] == "ok" and row["fwd_ms"] > 0 and row["bwd_ms"] > 0

    kernels = data["kernel_bandwidth"]["rows"]
    assert "min/max fwd" in data["kernel_bandwidth"]["model"]
    expected = [(name, p, f"{name[:3]} {k}") for name in names for p in ("fp32", "bf16")
                for k in ("fwd", "fwd + arg", "bwd")]  # CPU: no deterministic CSR^T row
    assert [(k["case"], k["precision"], k["kernel"]) for k in kernels] == expected
    for k in kernels:
        d = int(k["case"].split("D=")[1].split(",")[0])
        size = 4 if k["precision"] == "fp32" else 2
        arg = 1 if k["split"]["max_degree"] <= 254 else 2  # bytes of an arg code
        model = {"fwd": (nnz + n) * d * size, "fwd + arg": (nnz + n) * d * size + n * d * arg,
                 "bwd": n * d * (size + arg) + n * d * size}[k["kernel"][4:]]
        assert k["min_bytes"] == model
        assert k["status"] == "ok" and k["ms"] > 0 and k["gbs"] > 0
        split = k["split"]
        assert split["quantile"] == 0.99 and split["used"] is False
        assert 0 <= split["hub_rows"] <= n and 0 <= split["hub_edges"] <= nnz

    bars = {c["check"]: c for c in data["bars"]}
    where = "min aggregation D=512 fp32 vs pyg"
    assert [bars[f"{where}: {label}"]["bar"] for label in (
        "forward speedup", "backward speedup", "memory ratio")] == [5.0, 40.0, 20.0]
    for name in plain:
        for phase in ("fwd", "bwd"):
            assert bars[f"{name} bf16 vs our fp32: {phase} speedup"]["bar"] == 1.6
    assert not any("ReLU" in check for check in bars)  # no bar of their own

    printed = capsys.readouterr().out
    assert "Light/heavy split of the min/max kernels" in printed
    assert printed.index("Light/heavy split") > printed.index("Aggregation kernels alone")

    if not _has_nn("MinAggregation", "MaxAggregation", "SAGEConv"):
        pytest.skip("pyg_ioaware.nn.MinAggregation / MaxAggregation / SAGEConv not there yet: "
                    "our rows unchecked")
    for row in rows:
        assert row["status"] == "ok" and row["fwd_ms"] > 0 and row["bwd_ms"] > 0
    assert bars["ours runs on every graph (no OOM, no error)"]["status"] == "met"
    assert {s["graphs"] == ["arxiv-like"] for s in data["summary"]} == {True}
    assert bars[f"{where}: forward speedup"]["value"] > 0
    assert bars[f"{where}: backward speedup"]["value"] > 0
    assert bars[f"{where}: memory ratio"]["status"] == "n/a"  # no memory figures on CPU
    for name in plain:
        assert bars[f"{name} bf16 vs our fp32: fwd speedup"]["value"] > 0


@pytest.mark.parametrize("reduce", ["min", "max"])
def test_our_aggregation_matches_pyg_in_the_cases(reduce):
    if not _has_nn("MinAggregation", "MaxAggregation"):
        pytest.skip("pyg_ioaware.nn.MinAggregation / MaxAggregation not there yet")
    torch.manual_seed(0)
    edge_index, n = graphs.generate("arxiv-like", SCALE)
    work = cases.Workload(edge_index, n, "fp32")
    case = cases.CASES[f"{reduce}64"]
    ours = case.make_ours(work)
    pyg = case.baselines["pyg"](work, ours)
    x = torch.randn(n, 64, requires_grad=True)
    out = ours.step(x)
    (grad,) = torch.autograd.grad(out, x, torch.ones_like(out))
    x2 = x.detach().requires_grad_()
    expected = pyg.step(x2)
    (expected_grad,) = torch.autograd.grad(expected, x2, torch.ones_like(expected))
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grad, expected_grad)


def test_sage_cases_copy_weights_and_match_pyg():
    if not _has_nn("SAGEConv"):
        pytest.skip("pyg_ioaware.nn.SAGEConv not there yet")
    torch.manual_seed(0)
    edge_index, n = graphs.generate("arxiv-like", SCALE)
    work = cases.Workload(edge_index, n, "fp32")
    case = cases.CASES["sage-min512"]
    ours = case.make_ours(work)
    pyg = case.baselines["pyg-sage"](work, ours)
    x = torch.randn(n, 512)
    torch.testing.assert_close(ours.step(x), pyg.step(x), atol=1e-4, rtol=1e-4)

    # Mini-batch layers: our state_dict loads into PyG's and both compute the same.
    batch = minibatch.generate_batches(minibatch.SIZES["small"], scale=0.02, count=1)[0]
    for key in ("sage-mean", "sage-max"):
        mini = cases.MINIBATCH_CASES[key]
        model = minibatch.TwoLayer(mini.make_ours, 64)
        reference = minibatch.TwoLayer(mini.make_pyg, 64)
        reference.load_state_dict(model.state_dict())
        torch.testing.assert_close(model(batch.x, batch.edge_index),
                                   reference(batch.x, batch.edge_index), atol=1e-4, rtol=1e-4)


def test_cli_runs_the_sage_minibatch_cases(tmp_path):
    if not _has_nn("SAGEConv"):
        pytest.skip("pyg_ioaware.nn.SAGEConv not there yet")
    out = tmp_path / "bench"
    assert main(["--cases", "none", "--minibatch-cases", "sage-mean,sage-max", "--dtypes",
                 "fp32", "--iters", "2", "--warmup", "0", "--scale", "0.01",
                 "--device", "cpu", "--minibatch", "small", "--out", str(out)]) == 0
    mini = json.loads((out / "results.json").read_text())["minibatch"]
    assert list(mini["batches"]["small"]["first_call"]) == ["SAGEConv mean", "SAGEConv max"]
    assert [(r["case"], r["precision"], r["impl"]) for r in mini["results"]] == [
        (name, "fp32", impl) for name in ("SAGEConv mean", "SAGEConv max")
        for impl in ("ours", "pyg", "ours-same-graph")]
    for r in mini["results"]:
        assert r["status"] == "ok" and r["step_ms"] > 0, r
    assert all(c["pyg_over_ours"] > 0 for c in mini["comparisons"])


# -------------------------------------------------------- attention family

def test_attention_cases_are_registered():
    from pyg_ioaware.bench.cases import attention

    layer = cases.select("gatv2-2x64,gatv2-8x128")
    assert [(c.key, c.name) for c in layer] == [("gatv2-2x64", "GATv2Conv (2, 64)"),
                                                ("gatv2-8x128", "GATv2Conv (8, 128)")]
    for case, (heads, d) in zip(layer, [(2, 64), (8, 128)]):
        assert case.family == "attention" and case.config == {"heads": heads, "D": d}
        assert case.in_channels == heads * d and list(case.baselines) == ["pyg"]
        assert case.bf16_over_fp32 == cases.BF16_OVER_FP32 and case.make_kernels is not None
        assert case.kernel_bars == tuple(cases.KernelBar(attention.FWD_KERNEL, "pokec-like",
                                                         0.6, p) for p in ("fp32", "bf16"))
    two, eight = layer
    assert two.bar == cases.Bar(fwd=10.0, bwd=6.0, mem=20.0) and eight.bar is None
    assert two.absolute_bars == (cases.AbsoluteBar("arxiv-like", 0.85, 2.3),
                                 cases.AbsoluteBar("pokec-like", 9.5, 28.0),
                                 cases.AbsoluteBar("web-like", 9.2, 25.0))
    assert eight.absolute_bars == ()
    assert [c.key for c in cases.CASES.values()][-4:] == [
        "gatv2-2x64", "gatv2-8x128", "transformer-4x128", "transformer-2x128"]
    assert [c.key for c in cases.select("attention")][-2:] == ["transformer-4x128",
                                                               "transformer-2x128"]
    assert [(c.key, c.name) for c in cases.select("attention", cases.MINIBATCH_CASES)] == [
        ("gatv2", "GATv2Conv"), ("transformer", "TransformerConv")]


def test_transformer_cases_are_registered():
    from pyg_ioaware.bench.cases import transformer

    layer = cases.select("transformer-4x128,transformer-2x128")
    assert [c.name for c in layer] == ["TransformerConv (4, 128)", "TransformerConv (2, 128)"]
    for case, heads in zip(layer, (4, 2)):
        assert case.family == "attention" and case.config == {"heads": heads, "D": 128}
        assert case.in_channels == heads * 128 and list(case.baselines) == ["pyg"]
        assert case.bf16_over_fp32 == 1.6 and case.bytes_model == transformer.BYTES_MODEL
        assert case.kernel_bars == tuple(cases.KernelBar(transformer.FWD_KERNEL, "pokec-like",
                                                         0.6, p) for p in ("fp32", "bf16"))
    four, two = layer
    assert four.bar == cases.Bar(fwd=4.0, bwd=4.0, mem=12.0) and two.bar is None
    kernels = (transformer.FWD_KERNEL, transformer.BWD_KERNEL)
    assert four.absolute_bars == (cases.AbsoluteBar("arxiv-like", 1.75, 3.45, kernels=kernels),
                                  cases.AbsoluteBar("pokec-like", 27.6, 79.0, kernels=kernels))
    assert two.absolute_bars == ()


def test_attention_graph_has_one_self_loop_per_node_built_once_per_graph():
    from pyg_ioaware.bench.cases import attention

    # 4 nodes: a self loop on node 1 (twice) and on node 3, a duplicate edge 0 -> 2.
    edge_index = torch.tensor([[0, 1, 1, 0, 3, 2, 0], [2, 1, 1, 2, 3, 0, 1]])
    looped = attention.one_self_loop_per_node(edge_index, 4, 4)
    assert looped.tolist() == [[0, 0, 2, 0, 0, 1, 2, 3], [2, 2, 0, 1, 0, 1, 2, 3]]
    src, dst = looped
    loops = src[src == dst]
    assert sorted(loops.tolist()) == [0, 1, 2, 3]  # exactly one per node
    # Bipartite: loops for the nodes below min(num_src, num_dst).
    assert attention.one_self_loop_per_node(torch.tensor([[4], [0]]), 5, 2).tolist() == [
        [4, 0, 1], [0, 0, 1]]

    # One build per graph: every workload of the graph shares it, another graph does not.
    per_graph = {}
    first = cases.Workload(edge_index, 4, "fp32", per_graph=per_graph)
    again = cases.Workload(edge_index, 4, "bf16", per_graph=per_graph)
    built = attention.looped_edge_index(first)
    assert attention.looped_edge_index(again) is built and torch.equal(built, looped)
    assert attention.looped_edge_index(cases.Workload(edge_index, 4, "fp32")) is not built


def test_attention_bytes_models():
    from pyg_ioaware.bench.cases import attention

    # A toy graph: 5 nodes, 7 edges + 5 self loops = 12 entries; H=2, D=4, fp32.
    nnz, n, h, d, s = 12, 5, 2, 4, 4
    row = h * d * s  # 32 bytes
    # fwd: x_l per entry, x_r and out per destination, lse (fp32) per destination and head.
    assert attention.forward_bytes(nnz, n, h, d, s) == 12 * 32 + 2 * 5 * 32 + 5 * 2 * 4 == 744
    # weights: x_l per entry, x_r and lse per destination, alpha fp32 per entry and head.
    assert attention.weights_bytes(nnz, n, h, d, s) == 12 * 32 + 5 * 32 + 40 + 12 * 2 * 4
    # bwd: 3 rows per entry, x_l + grad_x_l per source, x_r + grad_out + grad_x_r per
    # destination (G from the entries: out is not read), lse.
    assert attention.backward_bytes(nnz, 6, n, h, d, s) == 3 * 12 * 32 + 2 * 6 * 32 + \
        3 * 5 * 32 + 40
    assert attention.backward_bytes(nnz, n, n, h, d, 2) == (36 + 10 + 15) * 16 + 40  # bf16


def test_gatv2_kernels_alone_on_a_toy_graph(monkeypatch):
    from pyg_ioaware.bench.bandwidth import measure_kernels
    from pyg_ioaware.bench.cases import attention

    torch.manual_seed(0)
    n = 6
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 2], [1, 2, 3, 4, 5, 0, 3, 3]])
    work = cases.Workload(edge_index, n, "fp32")
    kernels = cases.CASES["gatv2-2x64"].make_kernels(work)
    assert [k.name for k in kernels] == [attention.FWD_KERNEL, attention.WEIGHTS_KERNEL,
                                         attention.BWD_KERNEL]
    nnz = 8 + n  # the self loops count
    assert [k.min_bytes for k in kernels] == [
        attention.forward_bytes(nnz, n, 2, 64, 4), attention.weights_bytes(nnz, n, 2, 64, 4),
        attention.backward_bytes(nnz, n, n, 2, 64, 4)]
    assert all(k.info["hub_split"]["hub_rows"] == 0 for k in kernels)
    rows = measure_kernels(kernels, torch.device("cpu"), 1.0)
    assert all(r["status"] in ("ok", "unsupported") for r in rows), rows
    try:
        from pyg_ioaware.ops.attention import gatv2_reference  # noqa: F401
    except ImportError:
        pytest.skip("pyg_ioaware.ops.attention not there yet")
    assert all(r["status"] == "ok" and r["ms"] > 0 for r in rows), rows
    out, lse = kernels[0].run()
    assert out.shape == (n, 2, 64) and lse.shape == (n, 2)
    assert kernels[1].run().shape == (nnz, 2)
    grad_x_l, grad_x_r, grad_att, _ = kernels[2].run()
    assert grad_x_l.shape == grad_x_r.shape == (n, 2, 64) and grad_att.shape == (2, 64)

    # An op the op layer lacks: its row is "unsupported", and so are the rows needing it.
    from pyg_ioaware.ops import attention as ops_attention

    monkeypatch.delattr(ops_attention, "gatv2_trusted")
    rows = measure_kernels(cases.CASES["gatv2-2x64"].make_kernels(work), torch.device("cpu"),
                           1.0)
    assert [r["status"] for r in rows] == ["unsupported"] * 3
    assert "gatv2_trusted is not available" in rows[0]["detail"]


def test_gatv2_cases_match_pyg():
    if not _has_nn("GATv2Conv"):
        pytest.skip("pyg_ioaware.nn.GATv2Conv not there yet")
    torch.manual_seed(0)
    edge_index, n = graphs.generate("arxiv-like", SCALE)
    work = cases.Workload(edge_index, n, "fp32")
    case = cases.CASES["gatv2-2x64"]
    ours = case.make_ours(work)
    pyg = case.baselines["pyg"](work, ours)
    x = torch.randn(n, 128, requires_grad=True)
    out = ours.step(x)
    (grad,) = torch.autograd.grad(out, x, torch.ones_like(out))
    x2 = x.detach().requires_grad_()
    expected = pyg.step(x2)
    (expected_grad,) = torch.autograd.grad(expected, x2, torch.ones_like(expected))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-4)


def test_gatv2_minibatch_layers_share_state_and_outputs():
    from torch_geometric.nn import GATv2Conv

    mini = cases.MINIBATCH_CASES["gatv2"]
    reference = minibatch.TwoLayer(mini.make_pyg, 64)
    assert isinstance(reference.conv1, GATv2Conv)
    # Hidden layer: 2 heads of 32 concatenated; output layer: 47 classes, heads averaged.
    assert (reference.conv1.heads, reference.conv1.out_channels, reference.conv1.concat) == (
        2, 32, True)
    assert (reference.conv2.heads, reference.conv2.out_channels, reference.conv2.concat) == (
        2, minibatch.NUM_CLASSES, False)
    batch = minibatch.generate_batches(minibatch.SIZES["small"], scale=0.02, count=1)[0]
    assert reference(batch.x, batch.edge_index).shape == (batch.num_nodes,
                                                          minibatch.NUM_CLASSES)
    if not _has_nn("GATv2Conv"):
        pytest.skip("pyg_ioaware.nn.GATv2Conv not there yet")
    model = minibatch.TwoLayer(mini.make_ours, 64)
    reference.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(batch.x, batch.edge_index),
                               reference(batch.x, batch.edge_index), atol=1e-4, rtol=1e-4)


def test_cli_runs_the_gatv2_cases(tmp_path, capsys):
    from pyg_ioaware.bench.cases import attention

    out = tmp_path / "bench"
    assert main(["--graphs", "arxiv-like", "--cases", "gatv2-2x64,gatv2-8x128", "--dtypes",
                 "fp32", "--iters", "1", "--warmup", "1", "--scale", str(SCALE), "--device",
                 "cpu", "--minibatch", "none", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    graph = data["graphs"]["arxiv-like"]
    n, nnz = graph["num_nodes"], graph["num_edges"] + graph["num_nodes"]  # + one loop each

    rows = data["results"]
    assert [(r["case"], r["precision"], r["impl"]) for r in rows] == [
        (name, "fp32", impl) for name in ("GATv2Conv (2, 64)", "GATv2Conv (8, 128)")
        for impl in ("ours", "pyg")]
    assert all(r["family"] == "attention" for r in rows)
    for row in rows:
        assert row["status"] in ("ok", "unsupported"), row
        if row["impl"] == "pyg":  # PyG runs whether ours built or not
            assert row["status"] == "ok" and row["fwd_ms"] > 0 and row["bwd_ms"] > 0

    kernels = data["kernel_bandwidth"]["rows"]
    assert "gatv2 fwd" in data["kernel_bandwidth"]["model"]
    assert [(k["case"], k["kernel"]) for k in kernels] == [
        (name, kernel) for name in ("GATv2Conv (2, 64)", "GATv2Conv (8, 128)")
        for kernel in (attention.FWD_KERNEL, attention.WEIGHTS_KERNEL, attention.BWD_KERNEL)]
    for k, (h, d) in zip(kernels, [(2, 64)] * 3 + [(8, 128)] * 3):
        assert k["status"] in ("ok", "unsupported"), k
        assert k["min_bytes"] == {
            attention.FWD_KERNEL: attention.forward_bytes(nnz, n, h, d, 4),
            attention.WEIGHTS_KERNEL: attention.weights_bytes(nnz, n, h, d, 4),
            attention.BWD_KERNEL: attention.backward_bytes(nnz, n, n, h, d, 4)}[k["kernel"]]

    bars = {c["check"]: c for c in data["bars"]}
    where = "GATv2Conv (2, 64) fp32 vs pyg"
    assert [bars[f"{where}: {label}"]["bar"] for label in (
        "forward speedup", "backward speedup", "memory ratio")] == [10.0, 6.0, 20.0]
    for name in ("GATv2Conv (2, 64)", "GATv2Conv (8, 128)"):
        for phase in ("fwd", "bwd"):
            assert bars[f"{name} bf16 vs our fp32: {phase} speedup"]["bar"] == 1.6
        share = bars[f"{name} fp32 on pokec-like: {attention.FWD_KERNEL} share of copy"]
        assert (share["bar"], share["status"], share["better"]) == (0.6, "n/a", "higher")
    # Absolute bars hold at protocol size: n/a on a scaled arxiv-like, the value kept.
    fwd = bars["GATv2Conv (2, 64) fp32 on arxiv-like: forward ms"]
    assert (fwd["bar"], fwd["better"], fwd["status"], fwd["unit"]) == (0.85, "lower", "n/a",
                                                                       "ms")
    assert bars["GATv2Conv (2, 64) fp32 on web-like: backward ms"]["bar"] == 25.0
    printed = capsys.readouterr().out
    assert "GATv2Conv (2, 64) fp32 on arxiv-like: forward ms: " in printed

    if not _has_nn("GATv2Conv"):
        pytest.skip("pyg_ioaware.nn.GATv2Conv not there yet: our rows unchecked")
    assert all(r["status"] == "ok" for r in rows)
    assert fwd["value"] == rows[0]["fwd_ms"]
    assert bars["ours runs on every graph (no OOM, no error)"]["status"] == "met"


def test_transformer_bytes_models():
    from pyg_ioaware.bench.cases import transformer

    # A toy graph: 5 nodes, 7 edges + 5 self loops = 12 entries; H=2, D=4, fp32.
    nnz, n, h, d, s = 12, 5, 2, 4, 4
    row = h * d * s  # 32 bytes
    # fwd: k and v per entry, q and out per destination, lse (fp32) per destination and head.
    assert transformer.forward_bytes(nnz, n, h, d, s) == 2 * 12 * 32 + 2 * 5 * 32 + 40 == 1128
    # weights: k per entry, q and lse per destination, alpha fp32 per entry and head.
    assert transformer.weights_bytes(nnz, n, h, d, s) == 12 * 32 + 5 * 32 + 40 + 12 * 2 * 4
    # bwd: 4 rows per entry (k, v; q, grad_out), k, v, grad_k, grad_v per source, q,
    # grad_out, out, grad_q per destination, lse.
    assert transformer.backward_bytes(nnz, 6, n, h, d, s) == (4 * 12 + 4 * 6 + 4 * 5) * 32 + 40
    assert transformer.backward_bytes(nnz, n, n, h, d, 2) == (48 + 20 + 20) * 16 + 40  # bf16


def test_transformer_kernels_alone_on_a_toy_graph():
    from pyg_ioaware.bench.bandwidth import measure_kernels
    from pyg_ioaware.bench.cases import transformer

    torch.manual_seed(0)
    n = 6
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 2], [1, 2, 3, 4, 5, 0, 3, 3]])
    work = cases.Workload(edge_index, n, "bf16")
    kernels = cases.CASES["transformer-2x128"].make_kernels(work)
    assert [k.name for k in kernels] == [transformer.FWD_KERNEL, transformer.WEIGHTS_KERNEL,
                                         transformer.BWD_KERNEL]
    nnz = 8 + n  # the self loops count
    assert [k.min_bytes for k in kernels] == [
        transformer.forward_bytes(nnz, n, 2, 128, 2), transformer.weights_bytes(nnz, n, 2, 128, 2),
        transformer.backward_bytes(nnz, n, n, 2, 128, 2)]
    assert all(k.info["hub_split"]["hub_rows"] == 0 for k in kernels)
    rows = measure_kernels(kernels, torch.device("cpu"), 1.0)
    assert all(r["status"] == "ok" and r["ms"] > 0 for r in rows), rows
    out, lse = kernels[0].run()
    assert out.shape == (n, 2, 128) and out.dtype == torch.bfloat16 and lse.shape == (n, 2)
    alpha = kernels[1].run()
    assert alpha.shape == (nnz, 2)
    # Every destination has a self loop: its weights sum to one.
    looped = transformer.looped_edge_index(work)
    sums = torch.zeros(n, 2).index_add_(0, looped[1].sort(stable=True).values, alpha.float())
    torch.testing.assert_close(sums, torch.ones(n, 2))
    grad_q, grad_k, grad_v, grad_edge = kernels[2].run()
    assert grad_q.shape == grad_k.shape == grad_v.shape == (n, 2, 128)
    assert grad_edge.numel() == 0  # no edge features


def test_transformer_cases_match_pyg():
    torch.manual_seed(0)
    edge_index, n = graphs.generate("arxiv-like", SCALE)
    work = cases.Workload(edge_index, n, "fp32")
    case = cases.CASES["transformer-2x128"]
    ours = case.make_ours(work)
    pyg = case.baselines["pyg"](work, ours)
    assert not ours.module.root_weight and type(pyg.module).__module__.startswith(
        "torch_geometric")
    x = torch.randn(n, 256, requires_grad=True)
    out = ours.step(x)
    (grad,) = torch.autograd.grad(out, x, torch.ones_like(out))
    x2 = x.detach().requires_grad_()
    expected = pyg.step(x2)
    (expected_grad,) = torch.autograd.grad(expected, x2, torch.ones_like(expected))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-4)


def test_transformer_minibatch_layers_share_state_and_outputs():
    from torch_geometric.nn import TransformerConv

    mini = cases.MINIBATCH_CASES["transformer"]
    model = minibatch.TwoLayer(mini.make_ours, 64)
    reference = minibatch.TwoLayer(mini.make_pyg, 64)
    assert type(reference.conv1) is TransformerConv
    assert isinstance(model.conv1, TransformerConv) and type(model.conv1) is not TransformerConv
    # Hidden layer: 2 heads of 32 concatenated; output layer: 47 classes, heads averaged.
    assert (model.conv1.heads, model.conv1.out_channels, model.conv1.concat) == (2, 32, True)
    assert (model.conv2.heads, model.conv2.out_channels, model.conv2.concat) == (
        2, minibatch.NUM_CLASSES, False)
    reference.load_state_dict(model.state_dict())
    batch = minibatch.generate_batches(minibatch.SIZES["small"], scale=0.02, count=1)[0]
    torch.testing.assert_close(model(batch.x, batch.edge_index),
                               reference(batch.x, batch.edge_index), atol=1e-4, rtol=1e-4)


def test_cli_runs_the_transformer_cases(tmp_path, capsys):
    from pyg_ioaware.bench.cases import transformer

    out = tmp_path / "bench"
    assert main(["--graphs", "arxiv-like", "--cases", "transformer-4x128,transformer-2x128",
                 "--dtypes", "fp32", "--iters", "1", "--warmup", "1", "--scale", str(SCALE),
                 "--device", "cpu", "--minibatch", "small", "--minibatch-cases", "transformer",
                 "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    graph = data["graphs"]["arxiv-like"]
    n, nnz = graph["num_nodes"], graph["num_edges"] + graph["num_nodes"]  # + one loop each

    rows = data["results"]
    names = ("TransformerConv (4, 128)", "TransformerConv (2, 128)")
    assert [(r["case"], r["precision"], r["impl"]) for r in rows] == [
        (name, "fp32", impl) for name in names for impl in ("ours", "pyg")]
    for row in rows:
        assert row["family"] == "attention"
        assert row["status"] == "ok" and row["fwd_ms"] > 0 and row["bwd_ms"] > 0, row

    kernels = data["kernel_bandwidth"]["rows"]
    assert "transformer fwd" in data["kernel_bandwidth"]["model"]
    assert [(k["case"], k["kernel"]) for k in kernels] == [
        (name, kernel) for name in names
        for kernel in (transformer.FWD_KERNEL, transformer.WEIGHTS_KERNEL,
                       transformer.BWD_KERNEL)]
    for k, h in zip(kernels, [4] * 3 + [2] * 3):
        assert k["status"] == "ok" and k["ms"] > 0, k
        assert k["min_bytes"] == {
            transformer.FWD_KERNEL: transformer.forward_bytes(nnz, n, h, 128, 4),
            transformer.WEIGHTS_KERNEL: transformer.weights_bytes(nnz, n, h, 128, 4),
            transformer.BWD_KERNEL: transformer.backward_bytes(nnz, n, n, h, 128, 4)}[
                k["kernel"]]

    bars = {c["check"]: c for c in data["bars"]}
    where = "TransformerConv (4, 128) fp32 vs pyg"
    assert [bars[f"{where}: {label}"]["bar"] for label in (
        "forward speedup", "backward speedup", "memory ratio")] == [4.0, 4.0, 12.0]
    assert bars[f"{where}: forward speedup"]["value"] > 0
    # The kernels-alone ms bars read the kernel rows: n/a on a scaled graph, value kept.
    fwd = bars[f"TransformerConv (4, 128) fp32 on arxiv-like: {transformer.FWD_KERNEL} ms"]
    assert (fwd["bar"], fwd["better"], fwd["status"]) == (1.75, "lower", "n/a")
    assert fwd["value"] == kernels[0]["ms"]
    bwd = bars[f"TransformerConv (4, 128) fp32 on pokec-like: {transformer.BWD_KERNEL} ms"]
    assert (bwd["bar"], bwd["value"]) == (79.0, None) and bwd["detail"].startswith("not run")
    share = bars[f"TransformerConv (2, 128) bf16 on pokec-like: {transformer.FWD_KERNEL} "
                 f"share of copy"]
    assert share["bar"] == 0.6
    assert bars["ours runs on every graph (no OOM, no error)"]["status"] == "met"

    mini = data["minibatch"]
    assert list(mini["batches"]["small"]["first_call"]) == ["TransformerConv"]
    assert [(r["case"], r["impl"], r["status"]) for r in mini["results"]] == [
        ("TransformerConv", impl, "ok") for impl in ("ours", "pyg", "ours-same-graph")]
    printed = capsys.readouterr().out
    assert f"TransformerConv (4, 128) fp32 on arxiv-like: {transformer.FWD_KERNEL} ms: " in printed


def test_kernel_ms_bars_read_the_kernel_rows():
    from pyg_ioaware.bench.cases import transformer

    case = cases.CASES["transformer-4x128"]

    def kernel_row(kernel, ms, status="ok"):
        return {"graph": "arxiv-like", "case": case.name, "precision": "fp32", "kernel": kernel,
                "status": status, "ms": ms, "gbs": 1.0, "share_of_copy": 0.5}

    layer = [{"graph": "arxiv-like", "case": case.name, "precision": "fp32", "impl": "ours",
              "status": "ok", "fwd_ms": 100.0, "bwd_ms": 100.0, "peak_fwd_mb": None,
              "peak_fwd_bwd_mb": None}]  # the layer's ms are not what these bars read
    kernel_rows = [kernel_row(transformer.FWD_KERNEL, 1.5),
                   kernel_row(transformer.BWD_KERNEL, 4.0)]
    checks = {c["check"]: c for c in check_bars(layer, [case], kernel_rows=kernel_rows)}
    where = f"{case.name} fp32 on arxiv-like"
    fwd, bwd = checks[f"{where}: {transformer.FWD_KERNEL} ms"], checks[
        f"{where}: {transformer.BWD_KERNEL} ms"]
    assert (fwd["value"], fwd["status"]) == (1.5, "met")  # <= 1.75
    assert (bwd["value"], bwd["status"]) == (4.0, "NOT met")  # > 3.45
    assert f"{where}: forward ms" not in checks
    kernel_rows[1] = kernel_row(transformer.BWD_KERNEL, None, "OOM")
    checks = {c["check"]: c for c in check_bars(layer, [case], kernel_rows=kernel_rows)}
    oom = checks[f"{where}: {transformer.BWD_KERNEL} ms"]
    assert oom["status"] == "n/a" and oom["detail"].startswith("OOM")


def test_geomean_bars_take_every_suite_graph():
    """A geometric-mean bar decides only over the whole suite: run on part of
    it, the bar is n/a (its value kept, the graphs left out named); PyG
    running out of memory on a graph that ran leaves it out of the mean."""
    case = cases.CASES["gatv2-2x64"]

    def rows(graph, pyg_status="ok"):
        out = []
        for precision, ms in (("fp32", 1.0), ("bf16", 0.5)):
            out.append({"graph": graph, "case": case.name, "precision": precision,
                        "impl": "ours", "status": "ok", "fwd_ms": ms, "bwd_ms": ms,
                        "peak_fwd_mb": 1.0, "peak_fwd_bwd_mb": 1.0})
            ok = pyg_status == "ok"
            out.append({"graph": graph, "case": case.name, "precision": precision,
                        "impl": "pyg", "status": pyg_status, "fwd_ms": 30.0 if ok else None,
                        "bwd_ms": 30.0 if ok else None, "peak_fwd_mb": 40.0 if ok else None,
                        "peak_fwd_bwd_mb": 40.0 if ok else None})
        return out

    def bars(run):
        return {c["check"]: c for c in check_bars(run, [case])}

    names = [f"GATv2Conv (2, 64) fp32 vs pyg: {label}" for label in
             ("forward speedup", "backward speedup", "memory ratio")]
    names += [f"GATv2Conv (2, 64) bf16 vs our fp32: {phase} speedup" for phase in ("fwd", "bwd")]
    part = bars([r for g in ("arxiv-like", "pokec-like", "web-like") for r in rows(g)])
    for name in names:
        assert part[name]["status"] == "n/a" and part[name]["value"] > 0
        assert "not run on roads-like, tolokers-like, products-like" in part[name]["detail"]
    full = bars([r for g in graphs.SUITE for r in rows(
        g, "OOM" if g == "products-like" else "ok")])
    for name in names:
        assert full[name]["status"] == "met", (name, full[name])
    speedup = full["GATv2Conv (2, 64) fp32 vs pyg: forward speedup"]
    assert speedup["value"] == pytest.approx(30.0) and speedup["detail"] == "geomean over 5 graphs"


def test_named_graph_bars():
    """Absolute ms bars and kernel share-of-copy bars on named graphs."""
    from pyg_ioaware.bench.report import format_summary

    def row(graph, fwd, bwd, status="ok"):
        return {"graph": graph, "case": "GATv2Conv (2, 64)", "precision": "fp32", "impl": "ours",
                "status": status, "fwd_ms": fwd, "bwd_ms": bwd, "peak_fwd_mb": None,
                "peak_fwd_bwd_mb": None}

    rows = [row("arxiv-like", 0.8, 2.5), row("pokec-like", None, None, "OOM")]
    kernel_rows = [{"graph": "pokec-like", "case": "GATv2Conv (2, 64)", "precision": "fp32",
                    "kernel": "gatv2 fwd (out, lse)", "status": "ok", "ms": 5.0, "gbs": 3000.0,
                    "share_of_copy": 0.65},
                   {"graph": "pokec-like", "case": "GATv2Conv (2, 64)", "precision": "bf16",
                    "kernel": "gatv2 fwd (out, lse)", "status": "ok", "ms": 5.0, "gbs": 2000.0,
                    "share_of_copy": 0.45}]
    case = cases.CASES["gatv2-2x64"]
    checks = {c["check"]: c for c in check_bars(rows, [case], kernel_rows=kernel_rows)}
    where = "GATv2Conv (2, 64) fp32 on"
    assert checks[f"{where} arxiv-like: forward ms"]["status"] == "met"  # 0.8 <= 0.85
    assert checks[f"{where} arxiv-like: backward ms"]["status"] == "NOT met"  # 2.5 > 2.3
    oom = checks[f"{where} pokec-like: forward ms"]
    assert oom["status"] == "n/a" and oom["detail"].startswith("OOM")
    assert checks[f"{where} web-like: backward ms"]["detail"].startswith("not run")
    share = "on pokec-like: gatv2 fwd (out, lse) share of copy"
    assert checks[f"GATv2Conv (2, 64) fp32 {share}"]["status"] == "met"
    assert checks[f"GATv2Conv (2, 64) bf16 {share}"]["status"] == "NOT met"
    text = format_summary([], list(checks.values()))
    assert "arxiv-like: forward ms: 0.800 ms (bar <= 0.85)" in text
    assert f"fp32 {share}: 65% (bar >= 0.6)" in text

    # On scaled graphs the named-graph bars are n/a, their values kept.
    scaled = {c["check"]: c for c in check_bars(rows, [case], kernel_rows=kernel_rows,
                                                scale=0.5)}
    for name in (f"{where} arxiv-like: forward ms", f"GATv2Conv (2, 64) fp32 {share}"):
        assert scaled[name]["status"] == "n/a" and scaled[name]["value"] == checks[name]["value"]
        assert "scaled by 0.5" in scaled[name]["detail"]


def test_cli_append_merges_chunks(tmp_path):
    out = tmp_path / "bench"
    common = ["--cases", "gcn-d64", "--dtypes", "fp32", "--iters", "1", "--warmup", "0",
              "--scale", str(SCALE), "--device", "cpu", "--minibatch", "none", "--out", str(out)]
    assert main(["--graphs", "arxiv-like", *common]) == 0
    assert main(["--graphs", "roads-like", "--append", *common]) == 0
    data = json.loads((out / "results.json").read_text())
    assert list(data["graphs"]) == ["arxiv-like", "roads-like"]
    assert [(r["graph"], r["impl"]) for r in data["results"]] == [
        (g, impl) for g in ("arxiv-like", "roads-like") for impl in ("ours", "pyg",
                                                                     "torch.sparse")]
    assert {k["graph"] for k in data["kernel_bandwidth"]["rows"]} == {"arxiv-like",
                                                                        "roads-like"}
    assert all(s["graphs"] == ["arxiv-like", "roads-like"] for s in data["summary"])
    assert data["meta"]["cases_so_far"] == ["gcn-d64"]
    assert [a["args"]["graphs"] for a in data["meta"]["appended_to"]] == [["arxiv-like"]]
    # Measured again: replaced, not duplicated.
    assert main(["--graphs", "roads-like", "--append", *common]) == 0
    data = json.loads((out / "results.json").read_text())
    assert [r["graph"] for r in data["results"]].count("roads-like") == 3
    assert len(data["meta"]["appended_to"]) == 2
    # Another scale cannot be mixed in.
    other = [a if a != str(SCALE) else "0.003" for a in common]
    assert main(["--graphs", "roads-like", "--append", *other]) == 2


def test_minibatch_runs_pyg_when_ours_is_unsupported(tmp_path, monkeypatch):
    import pyg_ioaware.nn

    monkeypatch.delattr(pyg_ioaware.nn, "GATv2Conv", raising=False)
    out = tmp_path / "bench"
    assert main(["--cases", "none", "--minibatch-cases", "gatv2", "--dtypes", "fp32",
                 "--iters", "1", "--warmup", "0", "--scale", "0.005", "--device", "cpu",
                 "--minibatch", "small", "--out", str(out)]) == 0
    mini = json.loads((out / "results.json").read_text())["minibatch"]
    call = mini["batches"]["small"]["first_call"]["GATv2Conv"]
    assert call["status"] == "unsupported" and "GATv2Conv" in call["detail"]
    status = {r["impl"]: r["status"] for r in mini["results"]}
    assert status == {"ours": "unsupported", "pyg": "ok", "ours-same-graph": "unsupported"}


def test_slow_kernels_get_fewer_back_to_back_calls(monkeypatch):
    import time

    from pyg_ioaware.bench import bandwidth

    calls = []

    def kernel():
        calls.append(1)
        time.sleep(0.004)

    cpu = torch.device("cpu")
    bandwidth.time_back_to_back(kernel, cpu)  # fast enough: warm-up + every call
    assert len(calls) == 1 + bandwidth.CALLS_CPU * bandwidth.REPEATS_CPU
    calls.clear()
    monkeypatch.setattr(bandwidth, "CALL_BUDGET_MS", 1.0)  # slower than the budget
    ms = bandwidth.time_back_to_back(kernel, cpu)
    assert len(calls) == 1 + bandwidth.REPEATS_CPU and ms >= 4.0  # one call per run
