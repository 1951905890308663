"""ops.tuning: backend registry, choice order, persisted autotune."""
import json

import pytest
import torch

from pyg_ioaware import config
from pyg_ioaware.ops import tuning


class FakeBackend:
    def __init__(self, name, ms, supported=True):
        self.name, self.ms, self.supported, self.runs = name, ms, supported, 0

    def supports(self, shape):
        return self.supported

    def run(self, call):
        self.runs += 1


@pytest.fixture
def family(monkeypatch, tmp_path):
    """A fresh family with three backends, a private tuning file."""
    monkeypatch.setenv(tuning.ENV_TUNING_FILE, str(tmp_path / "tuning.json"))
    monkeypatch.setattr(tuning, "_REGISTRY", {})
    tuning.reset()
    backends = [FakeBackend("slow", 3.0), FakeBackend("fast", 1.0),
                FakeBackend("unsupported", 0.1, supported=False)]
    for b in backends:
        tuning.register_backend("fake", b)
    yield backends
    tuning.reset()


def shape(width=64, nnz=1000, rows=100):
    return tuning.shape_class("fake", "forward", width, torch.float32, torch.device("cpu"),
                              nnz, rows)


def test_shape_class_buckets():
    s = shape(width=65, nnz=1000, rows=100)
    assert (s.width_bucket, s.degree_bucket, s.dtype, s.device) == (128, 3, "float32", "cpu")
    assert shape(width=64).width_bucket == 64 and shape(nnz=1, rows=0).degree_bucket == 0


def test_heuristic_is_the_first_supported_backend(family):
    timed = []
    assert tuning.choose(shape(), lambda b: timed.append(b.name) or b.ms).name == "slow"
    assert timed == []  # nothing timed without autotune


def test_autotune_times_supported_backends_and_persists(family, monkeypatch, tmp_path):
    monkeypatch.setattr(config, "autotune", True)
    timed = []
    chosen = tuning.choose(shape(), lambda b: timed.append(b.name) or b.ms)
    assert chosen.name == "fast" and timed == ["slow", "fast"]
    saved = json.loads((tmp_path / "tuning.json").read_text())["choices"]
    assert saved == {shape().key(): "fast"}
    # Another process (a fresh in-memory state) reads the choice back, timing nothing.
    tuning.reset()
    assert tuning.choose(shape(), lambda b: pytest.fail("timed again")).name == "fast"
    # Another shape class is tuned on its own.
    assert tuning.choose(shape(width=7), lambda b: b.ms).name == "fast"
    assert len(json.loads((tmp_path / "tuning.json").read_text())["choices"]) == 2


def test_a_failing_backend_is_skipped_when_tuning(family, monkeypatch):
    monkeypatch.setattr(config, "autotune", True)

    def time_backend(b):
        if b.name == "fast":
            raise RuntimeError("not for this input")
        return b.ms

    assert tuning.choose(shape(), time_backend).name == "slow"


def test_pinned_backend_wins(family, monkeypatch):
    monkeypatch.setenv("PYG_IOAWARE_BACKEND_FAKE", "fast")
    assert tuning.choose(shape(), lambda b: b.ms).name == "fast"
    monkeypatch.setenv("PYG_IOAWARE_BACKEND_FAKE", "unsupported")
    with pytest.raises(ValueError, match="does not support"):
        tuning.choose(shape(), lambda b: b.ms)


def test_registry_rejects_duplicates(family):
    with pytest.raises(ValueError, match="twice"):
        tuning.register_backend("fake", FakeBackend("fast", 1.0))


def test_spmm_backends_are_registered():
    names = [b.name for b in tuning.backends("spmm")]
    assert names[0] == "pygio-csr" and "cusparse-alg2" in names and "torch" in names
    cpu = tuning.shape_class("spmm", "forward", 64, torch.float32, torch.device("cpu"), 10, 10)
    assert [b.name for b in tuning.backends("spmm") if b.supports(cpu)] == ["torch"]


def test_spmm_heuristic_follows_the_measured_table():
    def first(direction, width, dtype, nnz, degree=4):
        shape = tuning.shape_class("spmm", direction, width, dtype, torch.device("cpu"), nnz,
                                   nnz // degree)
        return tuning.backends("spmm", shape)[0].name

    # Small graphs: ours, both directions.
    assert first("forward", 512, torch.float32, 100_000) == "pygio-csr"
    assert first("transposed", 64, torch.bfloat16, 100_000) == "pygio-csr"
    # Large graphs: every 16-bit and every narrow float32 forward is ours.
    assert first("forward", 64, torch.bfloat16, 5_000_000) == "pygio-csr"
    assert first("forward", 512, torch.float16, 1_500_000) == "pygio-csr"
    assert first("forward", 64, torch.float32, 1_500_000) == "pygio-csr"
    # Wide float32: cuSPARSE below 2^22 entries, ours from there on, and ours
    # at any size for rows of 32 entries and more.
    assert first("forward", 256, torch.float32, 1_500_000, degree=8) == "cusparse-alg2"
    assert first("forward", 512, torch.float32, 5_000_000, degree=20) == "pygio-csr"
    assert first("forward", 512, torch.float32, 1_050_000, degree=89) == "pygio-csr"
    assert first("forward", 128, torch.float32, 1_500_000, degree=31) == "cusparse-alg2"
    # float64 as measured before: narrow with average degree 8 and more.
    assert first("forward", 64, torch.float64, 5_000_000, degree=20) == "pygio-csr"
    assert first("forward", 64, torch.float64, 5_000_000) == "cusparse-alg2"
    # The transposed SpMM of a large graph (a scatter with atomics): cuSPARSE.
    assert first("transposed", 512, torch.bfloat16, 5_000_000) == "cusparse-alg2"


def test_choice_for_call_is_remembered_and_pins_still_win(family, monkeypatch):
    def pick():
        return tuning.choose_for_call("fake", "forward", 64, torch.float32,
                                      torch.device("cpu"), 1000, 100, lambda b: b.ms).name

    assert pick() == "slow"
    assert tuning._CHOSEN_BY_PARTS  # later calls: one lookup
    monkeypatch.setenv("PYG_IOAWARE_BACKEND_FAKE", "fast")
    assert pick() == "fast"
    monkeypatch.delenv("PYG_IOAWARE_BACKEND_FAKE")
    assert pick() == "slow"
    tuning.reset()
    assert not tuning._CHOSEN_BY_PARTS


def test_untimed_choices_of_known_classes_are_remembered_and_pins_still_win(family,
                                                                           monkeypatch):
    def untimed(nnz, rows):
        return tuning.untimed_choices("fake", 64, torch.float32, torch.device("cpu"), nnz,
                                      (("forward", rows), ("transposed", rows)))

    assert untimed(1000, 100) == ("slow", "slow")
    assert len(tuning._UNTIMED_BY_SIZES) == 1
    # Other sizes of the same classes (size bucket 9, degree bucket 3): the lookup.
    family[0].name = "renamed"  # what the table holds, not a new choice, is returned
    assert untimed(1001, 110) == ("slow", "slow")
    assert len(tuning._UNTIMED_BY_SIZES) == 1
    family[0].name = "slow"
    assert untimed(4000, 100) == ("slow", "slow")  # another size bucket: decided anew
    assert len(tuning._UNTIMED_BY_SIZES) == 2
    monkeypatch.setenv("PYG_IOAWARE_BACKEND_FAKE", "fast")
    assert untimed(1000, 100) == ("fast", "fast")
    monkeypatch.delenv("PYG_IOAWARE_BACKEND_FAKE")
    tuning.reset()
    assert not tuning._UNTIMED_BY_SIZES


def test_untimed_choices_leave_undecided_classes_to_autotune(family, monkeypatch):
    monkeypatch.setattr(config, "autotune", True)
    assert tuning.untimed_choices("fake", 64, torch.float32, torch.device("cpu"), 1000,
                                  (("forward", 100),)) is None
    assert not tuning._UNTIMED_BY_SIZES


def test_shape_class_size_bucket():
    assert shape(nnz=1).size_bucket == 0 and shape(nnz=1 << 20).size_bucket == 20
    assert shape(nnz=(1 << 20) - 1).size_bucket == 19
