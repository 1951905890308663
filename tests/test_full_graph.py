"""examples/full_graph_products.py on a small graph on the CPU: every layer
trains full-graph and reports its epoch time; an out-of-memory error is
reported with exit status 3, not raised."""
import importlib.util
import json
import pathlib

import pytest
import torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "full_graph_products.py"
SMALL = ["--device", "cpu", "--graph", "arxiv-like", "--scale", "0.01", "--hidden", "32",
         "--epochs", "3"]


def load_example():
    spec = importlib.util.spec_from_file_location("full_graph_products", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("layer,impl", [("sage", "ours"), ("gcn", "ours"), ("gatv2", "ours"),
                                        ("sage", "pyg")])
def test_trains_full_graph(tmp_path, layer, impl):
    out = tmp_path / "result.json"
    assert load_example().main(SMALL + ["--layer", layer, "--impl", impl,
                                        "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["status"] == "ok" and result["epoch_s"] > 0
    losses = [e["loss"] for e in result["epochs"]]
    assert losses[-1] < losses[0]
    assert 0 <= result["test_acc"] <= 1


def test_out_of_memory_is_reported(tmp_path, monkeypatch, capsys):
    example = load_example()

    def out_of_memory(*args):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")
    monkeypatch.setattr(example, "train_epoch", out_of_memory)
    out = tmp_path / "result.json"
    assert example.main(SMALL + ["--impl", "pyg", "--json", str(out)]) == example.OUT_OF_MEMORY
    assert "OUT OF MEMORY: pyg's sage on arxiv-like" in capsys.readouterr().out
    assert json.loads(out.read_text())["status"] == "out_of_memory"
