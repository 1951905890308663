"""The benchmark CLI on CPU: graph generators, the measurement, one tiny run."""
import json

import pytest
import torch

from pyg_ioaware.bench import cases, graphs
from pyg_ioaware.bench.cli import main
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
                 "--out", str(out)]) == 0
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
    assert [k["kernel"] for k in kernels] == ["ours A X", "ours A^T G", "torch.sparse A X",
                                              "torch.sparse A^T G"]
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
    assert printed.index("Aggregation kernels alone") > printed.index("The bar (BENCHMARKS.md)")
    assert printed.rstrip().splitlines()[-1].startswith("arxiv-like")
    pytest.importorskip("matplotlib")
    assert (out / "results.png").stat().st_size > 0


def test_cli_rejects_unknown_names():
    with pytest.raises(SystemExit):
        main(["--graphs", "no-such-graph", "--device", "cpu"])
    with pytest.raises(SystemExit):
        main(["--cases", "no-such-case", "--device", "cpu"])
