"""Every example script runs: --help, and a few epochs on the bundled
Planetoid data on the CPU (the full runs, with their accuracy checks, are
what the scripts do by default)."""
import importlib.util
import pathlib
import sys

import pytest
import torch

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
# The examples of this file; others (distributed, full-graph) have their own tests.
SCRIPTS = ["train_cora", "neighbor_loader", "node_classification", "custom_layer",
           "speed_memory"]


def load(name: str):
    """The example as a module (examples/ on sys.path, as when run as a script)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", SCRIPTS)
def test_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load(name).main(["--help"])
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("layer", ["gcn", "sage", "gatv2", "transformer"])
def test_node_classification(layer, capsys):
    assert load("node_classification").main(
        ["--layer", layer, "--epochs", "3", "--device", "cpu", "--impl", "both"]) == 0
    out = capsys.readouterr().out
    for impl in ("pyg_ioaware", "torch_geometric"):
        assert f"[{impl}] time per epoch" in out and f"[{impl}] train acc" in out
    assert "[compare]" in out


def test_node_classification_trains(capsys):
    # Enough epochs for the accuracy check of the script (a broken layer fails it).
    assert load("node_classification").main(
        ["--layer", "gcn", "--dataset", "CiteSeer", "--epochs", "25", "--device", "cpu"]) == 0
    assert "accuracy check skipped" not in capsys.readouterr().out


def test_node_classification_skips_missing_dataset(tmp_path, capsys):
    assert load("node_classification").main(
        ["--dataset", "PubMed", "--root", str(tmp_path), "--device", "cpu"]) == 0
    assert "skipped PubMed" in capsys.readouterr().out


def test_train_cora(capsys):
    assert load("train_cora").main(["--epochs", "3", "--device", "cpu", "--impl", "both"]) == 0
    assert "time per epoch" in capsys.readouterr().out


def test_neighbor_loader(capsys):
    assert load("neighbor_loader").main(["--epochs", "1", "--device", "cpu", "--impl", "both",
                                          "--sampler", "torch"]) == 0
    out = capsys.readouterr().out
    assert "[pyg_ioaware] full-graph evaluation" in out and "[compare]" in out


def test_custom_layer_matches_pyg(capsys):
    assert load("custom_layer").main(["--epochs", "3", "--device", "cpu", "--impl", "both"]) == 0
    out = capsys.readouterr().out
    assert "max |output difference|" in out and "time per epoch" in out


def test_speed_memory(capsys):
    assert load("speed_memory").main(["--device", "cpu", "--epochs", "2", "--nodes", "300",
                                      "--iters", "1", "--layers", "gcn,gatv2"]) == 0
    out = capsys.readouterr().out
    assert "no GPU here" in out or torch.cuda.is_available()
    assert "GATv2Conv" in out and "speedup (PyG ms / ours)" in out
