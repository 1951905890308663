"""Kernel choice by shape class: a backend registry, a heuristic, and an
opt-in autotune whose results persist on disk.

A *backend* is one way to run a family's kernel (a cuSPARSE algorithm, a
kernel of our own, the plain-torch implementation): it has a ``name``, says
whether it ``supports`` a ``ShapeClass``, and runs one call (``run``).
Families register their backends here; the tuner never knows what they are.

The choice is keyed by the shape class, never by the graph: family,
direction, width bucket, dtype, device (name and capability), a bucket of
the average degree and one of the entry count (known from sizes alone, so
no host synchronisation). In order, a choice comes from:

1. ``PYG_IOAWARE_BACKEND_<FAMILY>`` (e.g. ``PYG_IOAWARE_BACKEND_SPMM=cusparse-alg3``),
2. the table of tuned choices (in memory, loaded from the tuning file),
3. with autotune on (``PYG_IOAWARE_AUTOTUNE=1`` or ``config.autotune``) and
   outside CUDA-graph capture: every supported backend timed once on the
   call at hand, the fastest stored in the table and written to the file,
4. the family's heuristic: the first supported backend in its preference
   order for the shape class (registration order, unless the family
   registers a preference function written down from measurements).

The tuning file is ``$PYG_IOAWARE_TUNING_FILE``, else
``~/.cache/pyg_ioaware/tuning.json``; its entries are keyed by the shape
class, so they carry across graphs and processes. Eager and captured runs
read the same table, so they make the same choice.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional, Protocol, Tuple

import torch

from .. import config

ENV_AUTOTUNE = "PYG_IOAWARE_AUTOTUNE"
ENV_TUNING_FILE = "PYG_IOAWARE_TUNING_FILE"
ENV_BACKEND = "PYG_IOAWARE_BACKEND_{family}"
TIMED_RUNS = 3


@dataclass(frozen=True)
class ShapeClass:
    """What a kernel choice depends on (no graph identity, no data)."""
    family: str
    direction: str  # "forward" (A X) or "transposed" (A^T X over A's CSR)
    width_bucket: int  # the width rounded up to a power of two
    dtype: str
    device: str  # "cpu" or "<name> sm_<major><minor>"
    degree_bucket: int  # floor(log2(average degree)), 0 for average degree < 2
    size_bucket: int  # floor(log2(entries)), 0 for fewer than 2

    def key(self) -> str:
        return "|".join(str(v) for v in asdict(self).values())


class Backend(Protocol):
    """One way to run a family's kernel."""
    name: str

    def supports(self, shape: ShapeClass) -> bool: ...

    def run(self, call) -> None: ...


_REGISTRY: Dict[str, List[Backend]] = {}
# family -> (shape -> backend names, most preferred first); families without
# one prefer their registration order.
_PREFERENCES: Dict[str, Callable[[ShapeClass], List[str]]] = {}


def register_backend(family: str, backend: Backend) -> None:
    """Adds a backend to a family; registration order is the heuristic's
    preference order."""
    names = [b.name for b in _REGISTRY.get(family, [])]
    if backend.name in names:
        raise ValueError(f"backend {backend.name!r} is registered twice for {family}")
    _REGISTRY.setdefault(family, []).append(backend)


def register_preference(family: str, order: Callable[[ShapeClass], List[str]]) -> None:
    """The family's heuristic: ``order(shape)`` names backends, most
    preferred first; unnamed ones follow in registration order."""
    _PREFERENCES[family] = order


def backends(family: str, shape: Optional[ShapeClass] = None) -> List[Backend]:
    """The family's backends in registration order, or in the heuristic's
    preference order for ``shape``."""
    registered = list(_REGISTRY.get(family, []))
    if shape is None or family not in _PREFERENCES:
        return registered
    rank = {name: i for i, name in enumerate(_PREFERENCES[family](shape))}
    return sorted(registered, key=lambda b: rank.get(b.name, len(rank)))


_DEVICE_LABELS: Dict[torch.device, str] = {}


def device_label(device: torch.device) -> str:
    """"cpu", or the GPU's name and compute capability (cached per device)."""
    label = _DEVICE_LABELS.get(device)
    if label is None:
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)
            label = f"{torch.cuda.get_device_name(index)} sm_{major}{minor}"
        else:
            label = device.type
        _DEVICE_LABELS[device] = label
    return label


def _buckets(width: int, nnz: int, rows: int) -> Tuple[int, int, int]:
    """(width bucket, degree bucket, size bucket) in integer arithmetic:
    floor(log2(nnz / rows)) = floor(log2(nnz // rows)) for ratios >= 1.
    Each bucket is a function of the width, nnz.bit_length() and
    (nnz // rows).bit_length(): :func:`_class_sizes` keys the remembered
    answers by those (a finer key, cheaper than the buckets on a new
    graph's step), so keep it that way."""
    average_degree = nnz // max(rows, 1)
    degree_bucket = average_degree.bit_length() - 1 if average_degree >= 2 else 0
    return 1 << max(0, width - 1).bit_length(), degree_bucket, max(0, nnz.bit_length() - 1)


def shape_class(family: str, direction: str, width: int, dtype: torch.dtype,
                device: torch.device, nnz: int, rows: int) -> ShapeClass:
    """The shape class of one call, from sizes alone."""
    width_bucket, degree_bucket, size_bucket = _buckets(width, nnz, rows)
    return ShapeClass(family, direction, width_bucket, str(dtype).replace("torch.", ""),
                      device_label(device), degree_bucket, size_bucket)


class TuningTable:
    """Chosen backend names per shape class, persisted as JSON."""

    def __init__(self):
        self._choices: Dict[str, str] = {}
        self._loaded_from: Optional[str] = None
        self._lock = threading.Lock()

    @staticmethod
    def path() -> str:
        return os.environ.get(ENV_TUNING_FILE) or os.path.join(
            os.path.expanduser("~"), ".cache", "pyg_ioaware", "tuning.json")

    def _load(self) -> None:
        path = self.path()
        if self._loaded_from == path:
            return
        self._loaded_from = path
        try:
            with open(path) as f:
                self._choices = dict(json.load(f).get("choices", {}))
        except (OSError, ValueError):
            self._choices = {}

    def get(self, shape: ShapeClass) -> Optional[str]:
        with self._lock:
            self._load()
            return self._choices.get(shape.key())

    def put(self, shape: ShapeClass, name: str) -> None:
        """Stores a choice and rewrites the file (atomically)."""
        with self._lock:
            self._load()
            self._choices[shape.key()] = name
            path = self.path()
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump({"format": 1, "choices": self._choices}, f, indent=1, sort_keys=True)
            os.replace(tmp, path)

    def clear(self) -> None:
        """Forgets the in-memory table (the file stays)."""
        with self._lock:
            self._choices, self._loaded_from = {}, None


TABLE = TuningTable()
# Choices made in this process (tuned or heuristic), so a shape class is
# decided once: later calls cost one dict lookup.
_CHOSEN: Dict[ShapeClass, str] = {}
# The same choices keyed by the raw parts of their shape class (torch dtype
# and device, buckets), so the hot path builds no ShapeClass.
_CHOSEN_BY_PARTS: Dict[tuple, Backend] = {}
# untimed_choices' answers made of decided classes (no backend pinned), keyed
# by the sizes as far as their shape classes tell them apart
# (:func:`_class_sizes`): a new graph of known classes costs one lookup.
_UNTIMED_BY_SIZES: Dict[tuple, Tuple[str, ...]] = {}
# ENV_BACKEND per family, formatted once (backend_variable).
_BACKEND_VARIABLES: Dict[str, str] = {}


def reset() -> None:
    """Forgets every choice made in this process and the loaded table."""
    _CHOSEN.clear()
    _CHOSEN_BY_PARTS.clear()
    _UNTIMED_BY_SIZES.clear()
    TABLE.clear()


def autotune_enabled() -> bool:
    return config.autotune or os.environ.get(ENV_AUTOTUNE) == "1"


def choose(shape: ShapeClass, time_backend: Callable[[Backend], float]) -> Backend:
    """The backend for ``shape`` (see the module docstring for the order).
    ``time_backend(backend)`` returns ms of one run of the call at hand; it
    is called only when autotuning."""
    pinned = pinned_backend(shape.family)
    decided = None if pinned else _CHOSEN.get(shape)
    if decided is not None:  # the hot path: one lookup per call
        return next(b for b in _REGISTRY[shape.family] if b.name == decided)
    supported = [b for b in backends(shape.family, shape) if b.supports(shape)]
    if not supported:
        raise RuntimeError(f"no {shape.family} backend supports {shape}")
    by_name = {b.name: b for b in supported}
    if pinned:
        if pinned not in by_name:
            raise ValueError(f"{backend_variable(shape.family)}={pinned!r} "
                             f"does not support {shape}; supported: {sorted(by_name)}")
        return by_name[pinned]
    decided = TABLE.get(shape)
    if decided in by_name:
        _CHOSEN[shape] = decided
        return by_name[decided]
    capturing = shape.device != "cpu" and torch.cuda.is_current_stream_capturing()
    if autotune_enabled() and len(supported) > 1 and not capturing:
        timings = {}
        for backend in supported:
            try:
                timings[backend.name] = time_backend(backend)
            except Exception:  # a backend that fails here is simply not chosen
                continue
        if timings:
            best = min(timings, key=timings.get)
            TABLE.put(shape, best)
            _CHOSEN[shape] = best
            return by_name[best]
    if not autotune_enabled():  # otherwise a later call may still tune this class
        _CHOSEN[shape] = supported[0].name
    return supported[0]


def choose_for_call(family: str, direction: str, width: int, dtype: torch.dtype,
                    device: torch.device, nnz: int, rows: int,
                    time_backend: Callable[[Backend], float]) -> Backend:
    """:func:`choose` for the shape class of one call's sizes; a class
    already decided costs one dict lookup on a tuple of the call's parts."""
    parts = (family, direction, dtype, device) + _buckets(width, nnz, rows)
    pinned = pinned_backend(family)
    backend = None if pinned else _CHOSEN_BY_PARTS.get(parts)
    if backend is None:
        shape = shape_class(family, direction, width, dtype, device, nnz, rows)
        backend = choose(shape, time_backend)
        if not pinned and _CHOSEN.get(shape) == backend.name:
            _CHOSEN_BY_PARTS[parts] = backend
    return backend


def untimed_choices(family: str, width: int, dtype: torch.dtype, device: torch.device,
                    nnz: int, calls: Tuple[Tuple[str, int], ...]) -> Optional[Tuple[str, ...]]:
    """The names of the backends :func:`choose_for_call` gives calls of
    these sizes, one per (direction, rows) of ``calls``, where that needs no
    timing (decided classes, a pinned backend, autotune off); None where one
    of them would autotune first. One environment read for all of them, and
    without a pinned backend one lookup where calls of the same classes
    asked before (decided classes stay decided)."""
    pinned = pinned_backend(family)
    sizes = None if pinned else _class_sizes(family, width, dtype, device, nnz, calls)
    names = None if sizes is None else _UNTIMED_BY_SIZES.get(sizes)
    if names is not None:
        return names
    names, decided = [], sizes is not None
    for direction, rows in calls:
        parts = (family, direction, dtype, device) + _buckets(width, nnz, rows)
        backend = None if pinned else _CHOSEN_BY_PARTS.get(parts)
        if backend is None:
            if not pinned and autotune_enabled():
                return None
            backend = choose_for_call(family, direction, width, dtype, device, nnz, rows,
                                      _never_timed)
            decided = decided and _CHOSEN_BY_PARTS.get(parts) is backend
        names.append(backend.name)
    names = tuple(names)
    if decided:
        _UNTIMED_BY_SIZES[sizes] = names
    return names


def _class_sizes(family: str, width: int, dtype: torch.dtype, device: torch.device, nnz: int,
                 calls: Tuple[Tuple[str, int], ...]) -> tuple:
    """The sizes of :func:`untimed_choices`' calls as far as their shape
    classes tell them apart: the width, the bit lengths of nnz (the size
    bucket) and, per call, its direction and the bit length of nnz // rows
    (its degree bucket). A flat tuple, built in a loop: a new graph's step
    pays for this key."""
    key = [family, width, dtype, device, nnz.bit_length()]
    for direction, rows in calls:
        key.append(direction)
        key.append((nnz // (rows or 1)).bit_length())
    return tuple(key)


def pinned_backend(family: str) -> Optional[str]:
    """The backend ``$PYG_IOAWARE_BACKEND_<FAMILY>`` pins, if any (read on
    every call: tests and users may set it at any time)."""
    return os.environ.get(backend_variable(family))


def backend_variable(family: str) -> str:
    """The name of the variable that pins the family's backend (ENV_BACKEND,
    formatted once per family)."""
    variable = _BACKEND_VARIABLES.get(family)
    if variable is None:
        variable = _BACKEND_VARIABLES[family] = ENV_BACKEND.format(family=family.upper())
    return variable


def _never_timed(backend: Backend) -> float:
    raise AssertionError(f"untimed_choices timed {backend.name}")


def time_cuda_ms(run: Callable[[], None], device: torch.device,
                 runs: int = TIMED_RUNS) -> float:
    """Mean ms of ``run`` over ``runs`` calls after one warm-up (CUDA events)."""
    with torch.cuda.device(device):
        run()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(runs):
            run()
        stop.record()
        stop.synchronize()
    return start.elapsed_time(stop) / runs
