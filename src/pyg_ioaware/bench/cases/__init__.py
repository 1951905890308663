"""Registry of benchmark cases: our layer, its baselines, and the bar.

A :class:`Case` builds our implementation and each baseline for one graph
and precision; every builder returns an :class:`Impl` whose ``step(x)`` runs
the forward with the module already set up. Baselines receive our Impl so
they can copy its weights.

A :class:`MinibatchCase` names one layer for the mini-batch cases
(bench.minibatch): builders of our layer and of PyG's, from which the
2-layer model is made.

Each kernel family lives in its own module (``spmm``, ``reduce``,
``attention``; the attention family's TransformerConv cases in
``transformer``) and registers its layer cases and mini-batch cases there,
with their bars and the bytes model of its aggregation kernels.
Importing this package imports every family module, so :data:`CASES` and
:data:`MINIBATCH_CASES` are complete and the CLI picks them up.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import torch
from torch import Tensor, nn

from ..bandwidth import Kernel

# The implementation name of ours in every result row; baselines go by theirs.
OURS = "ours"

# Under bf16 autocast a case is at least this much faster than our own fp32
# (docs/benchmark_protocol.md; a family opts in through Case.bf16_over_fp32).
BF16_OVER_FP32 = 1.6


@dataclass
class Workload:
    """What a case runs on: the graph and the precision setting.

    Optional fields for the families that need them: ``num_src`` and
    ``num_dst`` describe a bipartite graph (edges from ``num_src`` source
    nodes to ``num_dst`` destination nodes; unset, both are ``num_nodes``),
    ``heads`` the attention heads and ``edge_attr`` one feature row per edge.

    ``per_graph``: what cases derive from the graph (e.g. the attention
    family's graph with one self loop per node), shared by every Workload of
    one graph: the CLI hands all cases and precisions of a graph the same
    dict and drops it with the graph, so :meth:`derived` builds each such
    structure once per graph, outside every timed region.
    """
    edge_index: Tensor
    num_nodes: int
    precision: str
    num_src: Optional[int] = None
    num_dst: Optional[int] = None
    heads: Optional[int] = None
    edge_attr: Optional[Tensor] = None
    per_graph: Dict[str, Any] = field(default_factory=dict, repr=False)

    def derived(self, key: str, build: Callable[[], Any]) -> Any:
        """``build()`` once per graph under ``key`` (see ``per_graph``)."""
        if key not in self.per_graph:
            self.per_graph[key] = build()
        return self.per_graph[key]

    @property
    def device(self) -> torch.device:
        return self.edge_index.device

    @property
    def size(self) -> Tuple[int, int]:
        """(number of source nodes, number of destination nodes)."""
        return (self.num_src if self.num_src is not None else self.num_nodes,
                self.num_dst if self.num_dst is not None else self.num_nodes)


@dataclass
class Impl:
    """A module set up for one workload and the forward ``step(x) -> out``."""
    module: nn.Module
    step: Callable[[Tensor], Tensor]


class Unsupported(Exception):
    """An implementation cannot run this precision on this device."""


@dataclass(frozen=True)
class Bar:
    """Geometric-mean bar against one baseline: speedups and memory ratio."""
    fwd: float
    bwd: float
    mem: float
    baseline: str = "pyg"
    precision: str = "fp32"


@dataclass(frozen=True)
class AbsoluteBar:
    """Our own layer on one named suite graph: median forward and backward
    ms at most ``fwd_ms`` / ``bwd_ms`` (the absolute bars of docs/benchmark_protocol.md, set
    for an H200 at protocol size: the check is n/a on scaled graphs).
    ``kernels``: (forward, backward) kernel row names (bench.bandwidth) where
    the bar is on the case's kernels alone rather than on its layer."""
    graph: str
    fwd_ms: float
    bwd_ms: float
    precision: str = "fp32"
    kernels: Optional[Tuple[str, str]] = None


@dataclass(frozen=True)
class KernelBar:
    """One kernel alone (bench.bandwidth, by its row name) on one named
    suite graph reaches at least ``share`` of the device's measured copy
    bandwidth under its family's bytes model (n/a on scaled graphs)."""
    kernel: str
    graph: str
    share: float
    precision: str = "fp32"


@dataclass(frozen=True)
class Case:
    """One benchmark case.

    ``key``: the CLI name; ``name``: the display name; ``in_channels``: width
    of the input features; ``baselines``: name -> builder taking the workload
    and our Impl; ``no_slower_than``: baselines ours must beat on every graph
    in every precision; ``bf16_over_fp32``: how much faster our bf16 must be
    than our fp32 (None: no such bar); ``make_kernels``: the aggregation
    kernels alone, for the effective-bandwidth table (bench.bandwidth), whose
    useful bytes follow the family's ``bytes_model`` (a formula, for the
    report); ``absolute_bars``: ms bars of our layer on named graphs;
    ``kernel_bars``: share-of-copy bars of its kernels on named graphs;
    ``features``: the input features (:data:`FEATURES`).
    """
    key: str
    name: str
    family: str
    config: Dict[str, int]
    in_channels: int
    make_ours: Callable[[Workload], Impl]
    baselines: Dict[str, Callable[[Workload, Impl], Impl]]
    bar: Optional[Bar] = None
    no_slower_than: Tuple[str, ...] = field(default=())
    bf16_over_fp32: Optional[float] = None
    make_kernels: Optional[Callable[[Workload], List[Kernel]]] = None
    bytes_model: Optional[str] = None
    absolute_bars: Tuple[AbsoluteBar, ...] = field(default=())
    kernel_bars: Tuple[KernelBar, ...] = field(default=())
    features: str = "normal"


#: Input features of a layer case: standard normal, or their ReLU (what a
#: hidden layer receives: half the entries 0, so a min over a few
#: neighbours is 0 in most elements, tied among the zero sources).
FEATURES = ("normal", "relu")


def random_features(kind: str, num_nodes: int, channels: int, device: torch.device,
                    dtype: torch.dtype) -> Tensor:
    """[num_nodes, channels] features of ``kind`` (:data:`FEATURES`): standard
    normal (the global generator), or their ReLU."""
    if kind not in FEATURES:
        raise ValueError(f"features must be one of {FEATURES}, got {kind!r}")
    x = torch.randn(num_nodes, channels, device=device, dtype=dtype)
    return x.relu_() if kind == "relu" else x


def input_features(case: Case, num_nodes: int, device: torch.device,
                   dtype: torch.dtype) -> Tensor:
    """The case's input features [num_nodes, in_channels] (``case.features``,
    :func:`random_features`), a leaf that requires grad (a layer in the
    middle of a network)."""
    return random_features(case.features, num_nodes, case.in_channels, device,
                           dtype).requires_grad_()


# A layer builder for the mini-batch cases: (in_channels, out_channels) -> a
# module called as ``layer(x, edge_index)``.
LayerBuilder = Callable[[int, int], nn.Module]


@dataclass(frozen=True)
class MinibatchBar:
    """The mini-batch bar: our training step at least ``speedup`` times as
    fast as PyG's, and with a new graph every step at most ``new_graph``
    times our own step with the graph reused."""
    speedup: float = 1.3
    new_graph: float = 1.15


@dataclass(frozen=True)
class MinibatchCase:
    """One layer in the mini-batch cases (bench.minibatch builds the 2-layer
    model and times its training step): ``make_ours`` and ``make_pyg`` build
    our layer and PyG's, with interchangeable state_dicts."""
    key: str
    name: str
    family: str
    make_ours: LayerBuilder
    make_pyg: LayerBuilder
    bar: MinibatchBar = MinibatchBar()


CASES: Dict[str, Case] = {}
MINIBATCH_CASES: Dict[str, MinibatchCase] = {}

C = TypeVar("C", Case, MinibatchCase)


def register(case: C) -> C:
    """Add a layer case to CASES, a mini-batch case to MINIBATCH_CASES."""
    registry = MINIBATCH_CASES if isinstance(case, MinibatchCase) else CASES
    if case.key in registry:
        raise ValueError(f"case {case.key!r} is registered twice")
    registry[case.key] = case
    return case


def select(spec: str, registry: Optional[Dict[str, C]] = None) -> List[C]:
    """Cases named by a comma list of keys, display names or families, "all"
    or "none", from ``registry`` (default: the layer cases)."""
    registry = CASES if registry is None else registry
    if spec == "all":
        return list(registry.values())
    if spec == "none":
        return []
    chosen: Dict[str, C] = {}
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        found = [c for c in registry.values() if token in (c.key, c.name, c.family)]
        if not found:
            names = ", ".join(f"{c.key} ({c.name})" for c in registry.values())
            raise ValueError(f"unknown case {token!r}; expected one of: {names}, "
                             f"a family, 'all' or 'none'")
        chosen.update((c.key, c) for c in found)
    return list(chosen.values())


# Every family module registers its cases on import (in this order in "all").
from . import spmm  # noqa: E402,F401
from . import reduce  # noqa: E402,F401
from . import attention  # noqa: E402,F401
from . import transformer  # noqa: E402,F401
