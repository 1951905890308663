"""Mini-batch cases of docs/benchmark_protocol.md: a new graph every training step.

A loader on a large graph hands the model a new, small ``edge_index`` every
step, so everything a layer does per graph (Graph build, tuning, host
overhead) is paid every step. For each batch size this module

- generates ``NUM_BATCHES`` sampled-subgraph-shaped batches on the device
  from a fixed seed (:func:`sample_subgraph`, :func:`generate_batches`);
- times a 2-layer model's training step (forward, cross-entropy on the seed
  nodes, backward, ``torch.optim.SGD`` step) cycling through them, in three
  variants (:data:`VARIANTS`): ours and PyG's layers given a fresh
  ``edge_index`` tensor every step (a clone made just before the timed
  step, so no graph cache can hit), and ours given the pre-generated
  tensors themselves (after the warm-up pass every step reuses a cached
  graph); the variants take turns in rounds (:func:`time_interleaved`), so
  a drift of the host's speed weighs on all three alike;
- times the Graph build on a fresh tensor and one layer's first call
  (forward + backward on a fresh graph) against a repeated call.

Which layers run is the registry :data:`cases.MINIBATCH_CASES`: each family
module registers its layers there (cases.spmm registers GCNConv).
"""
from __future__ import annotations

import statistics
import traceback
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cases import OURS, LayerBuilder, MinibatchCase, Unsupported
from .progress import Progress
from .timing import MB, Clock, autocast, free_memory, oom_message, take_turns, time_once

NUM_CLASSES = 47
NUM_BATCHES = 8
# Share of sampled neighbours that are already in the batch.
SHARED = 0.3
# Repetitions of the Graph build and first-call timings (median).
BUILD_REPEATS = 5
# Rounds of the interleaved step timings (time_interleaved).
ROUNDS = 5
LEARNING_RATE = 0.01

PYG, OURS_SAME_GRAPH = "pyg", "ours-same-graph"
# Variant -> (which layers, a fresh edge_index every step).
VARIANTS: Dict[str, Tuple[str, bool]] = {
    OURS: ("ours", True),
    PYG: ("pyg", True),
    OURS_SAME_GRAPH: ("ours", False),
}


@dataclass(frozen=True)
class BatchSize:
    """One mini-batch size: seed nodes, fanout per hop, feature width D."""
    name: str
    seeds: int
    fanouts: Tuple[int, ...]
    channels: int


SIZES: Dict[str, BatchSize] = {s.name: s for s in [
    BatchSize("small", 512, (10, 5), 64),
    BatchSize("medium", 1024, (15, 10), 128),
    BatchSize("large", 4096, (25, 10), 256),
]}


@dataclass
class Batch:
    """One sampled subgraph: edges grouped by destination, seed nodes first
    (ids 0..num_seeds-1), features ``x`` and the seeds' labels ``y``."""
    edge_index: Tensor
    num_nodes: int
    num_seeds: int
    x: Tensor
    y: Tensor


def sample_subgraph(num_seeds: int, fanouts: Sequence[int], gen: torch.Generator,
                    shared: float = SHARED) -> Tuple[Tensor, int]:
    """A subgraph shaped like one from PyG's NeighborLoader: ``(edge_index,
    num_nodes)``, relabelled 0..num_nodes-1 with the seeds first.

    Hop by hop, every node of the frontier (the seeds, then the nodes the
    previous hop discovered) gets ``fanout`` sampled neighbours: with
    probability ``shared`` a node already in the batch (drawn uniformly from
    the nodes before this hop, never the node itself), else a new node,
    numbered in order of appearance. Edges run from the sampled neighbour
    (row 0, source) to the frontier node (row 1, destination) and come
    grouped by destination in increasing destination id, as pyg-lib's
    sampler emits them. Vectorized per hop; ``num_seeds`` must be >= 2.
    """
    device = gen.device
    num_nodes, frontier_start, frontier_size = num_seeds, 0, num_seeds
    sources, destinations = [], []
    for fanout in fanouts:
        dst = torch.arange(frontier_start, frontier_start + frontier_size,
                           device=device).repeat_interleave(fanout)
        old = torch.rand(dst.numel(), generator=gen, device=device) < shared
        # Uniform over the existing nodes other than dst: draw from one fewer
        # and step over dst.
        pick = torch.randint(num_nodes - 1, (dst.numel(),), generator=gen, device=device)
        pick += pick >= dst
        new = torch.cumsum(~old, 0) + (num_nodes - 1)
        sources.append(torch.where(old, pick, new))
        destinations.append(dst)
        num_new = dst.numel() - int(old.sum())
        frontier_start, frontier_size = num_nodes, num_new
        num_nodes += num_new
    return torch.stack([torch.cat(sources), torch.cat(destinations)]), num_nodes


def scaled_seeds(size: BatchSize, scale: float) -> int:
    """Seed count at ``scale`` (node and edge counts follow it linearly)."""
    return max(2, round(size.seeds * scale))


def generate_batches(size: BatchSize, scale: float = 1.0, device: torch.device | str = "cpu",
                     seed: int = 0, count: int = NUM_BATCHES) -> List[Batch]:
    """``count`` batches of one size on ``device``: the same seed on the same
    device gives the same batches. Features are fp32 and need no grad (what
    a loader hands the first layer); labels are random, NUM_CLASSES classes."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 1_000_003 + zlib.crc32(f"minibatch-{size.name}".encode()))
    num_seeds = scaled_seeds(size, scale)
    batches = []
    for _ in range(count):
        edge_index, num_nodes = sample_subgraph(num_seeds, size.fanouts, gen)
        x = torch.randn(num_nodes, size.channels, generator=gen, device=gen.device)
        y = torch.randint(NUM_CLASSES, (num_seeds,), generator=gen, device=gen.device)
        batches.append(Batch(edge_index, num_nodes, num_seeds, x, y))
    return batches


class TwoLayer(nn.Module):
    """conv1(D, D) -> ReLU -> conv2(D, NUM_CLASSES), layers from a builder."""

    def __init__(self, make: LayerBuilder, channels: int):
        super().__init__()
        self.conv1 = make(channels, channels)
        self.conv2 = make(channels, NUM_CLASSES)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch,
               edge_index: Tensor, precision: str) -> None:
    """Forward (under the precision's autocast), cross-entropy on the seed
    nodes, backward, optimizer step."""
    optimizer.zero_grad(set_to_none=True)
    with autocast(precision, batch.x.device):
        out = model(batch.x, edge_index)
        loss = F.cross_entropy(out[:batch.num_seeds], batch.y)
    loss.backward()
    optimizer.step()


class StepTimer:
    """One variant's model and SGD optimizer, timing whole training steps
    cycling through ``batches``: :meth:`run` marks each step's start and
    end (CUDA events on a GPU), :meth:`finish` gives the median.

    ``new_graph``: every step gets a clone of the batch's edge_index, made
    just before the step's start mark, as a loader hands the model a new
    tensor before the step (the step is forward, backward and the
    optimizer, as the protocol defines it; the same-graph variant makes no
    clone, so a clone inside the step would count as a new graph's cost);
    otherwise the batch's own tensor, so a graph cache hits after the first
    pass."""

    def __init__(self, model: nn.Module, batches: Sequence[Batch], precision: str,
                 new_graph: bool):
        self.model, self.batches, self.precision, self.new_graph = (model, batches, precision,
                                                                     new_graph)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
        self.clock = Clock(batches[0].x.device)
        self.step_index, self.marks = 0, []

    def run(self, steps: int, record: bool = True) -> None:
        for _ in range(steps):
            batch = self.batches[self.step_index % len(self.batches)]
            self.step_index += 1
            edge_index = batch.edge_index.clone() if self.new_graph else batch.edge_index
            start = self.clock.mark()
            train_step(self.model, self.optimizer, batch, edge_index, self.precision)
            end = self.clock.mark()
            if record:
                self.marks.append((start, end))

    def finish(self) -> float:
        """The median step ms of every recorded step."""
        self.clock.synchronize()
        return statistics.median(self.clock.elapsed_ms(start, end) for start, end in self.marks)


def time_training(model: nn.Module, batches: Sequence[Batch], precision: str, new_graph: bool,
                  iters: int, warmup: int) -> float:
    """Median ms of a whole training step (see :class:`StepTimer`), after at
    least one pass over the batches as warm-up."""
    timer = StepTimer(model, batches, precision, new_graph)
    timer.run(max(warmup, len(batches)), record=False)
    timer.run(iters)
    return timer.finish()


def time_interleaved(timers: Dict[str, StepTimer], iters: int, warmup: int,
                     rounds: int = ROUNDS) -> Dict[str, Dict[str, object]]:
    """Per timer, ``{"status": "ok", "step_ms": median}`` or the status that
    stopped it (see :func:`_status`): the timers take turns in ``rounds``
    rounds (:func:`timing.take_turns`) after a warm-up of at least one pass
    over the batches each."""
    results: Dict[str, Dict[str, object]] = {}

    def failed(name: str, error: Exception) -> None:
        results[name] = _status(error)

    passes = max((len(timer.batches) for timer in timers.values()), default=0)
    take_turns({name: timer.run for name, timer in timers.items()}, iters,
               max(warmup, passes), rounds, failed)
    for name, timer in timers.items():
        if name not in results:
            results[name] = _guarded(lambda t=timer: {"step_ms": t.finish()})
    return {name: results[name] for name in timers}


def graph_build(batches: Sequence[Batch]) -> Dict[str, float]:
    """Median ms of ``Graph.from_input`` on a fresh clone of each batch's
    edge_index (up to BUILD_REPEATS batches, after one warm-up build), and
    the built Graph's MB."""
    from pyg_ioaware import Graph

    device = batches[0].x.device
    Graph.from_input(batches[0].edge_index.clone(), num_nodes=batches[0].num_nodes)
    times, graph = [], None
    for batch in _repeats(batches):
        fresh = batch.edge_index.clone()
        ms, graph = time_once(lambda: Graph.from_input(fresh, num_nodes=batch.num_nodes), device)
        times.append(ms)
    return {"build_ms": statistics.median(times), "graph_mb": graph.nbytes / MB}


def first_call(make: LayerBuilder, batches: Sequence[Batch]) -> Dict[str, float]:
    """One layer conv(D, D), fp32, forward + backward: median ms of the first
    call on a fresh graph (a clone of each batch's edge_index) and of a
    second call on that same, now cached, graph."""
    device = batches[0].x.device
    layer = make(batches[0].x.size(1), batches[0].x.size(1)).to(device)

    def call(batch: Batch, edge_index: Tensor) -> None:
        out = layer(batch.x, edge_index)
        out.backward(torch.ones_like(out))

    call(batches[0], batches[0].edge_index)  # one-time setup is not a per-graph cost
    first, repeat = [], []
    for batch in _repeats(batches):
        fresh = batch.edge_index.clone()
        first.append(time_once(lambda: call(batch, fresh), device)[0])
        repeat.append(time_once(lambda: call(batch, fresh), device)[0])
    return {"first_call_ms": statistics.median(first),
            "repeat_call_ms": statistics.median(repeat)}


def _repeats(batches: Sequence[Batch]) -> Sequence[Batch]:
    return [batches[i % len(batches)] for i in range(BUILD_REPEATS)]


def batch_info(size: BatchSize, batches: Sequence[Batch], scale: float) -> Dict[str, object]:
    """What the batches of one size look like (means over the batches)."""
    return {
        "seeds": batches[0].num_seeds, "fanouts": list(size.fanouts), "D": size.channels,
        "scale": scale, "batches": len(batches),
        "num_nodes": statistics.mean(b.num_nodes for b in batches),
        "num_edges": statistics.mean(b.edge_index.size(1) for b in batches),
    }


def run_size(size: BatchSize, cases: Sequence[MinibatchCase], precisions: Sequence[str],
             args, progress: Progress) -> Tuple[Dict[str, object], List[Dict[str, object]]]:
    """Everything measured at one batch size: ``(info, rows)``.

    ``info``: the batches' shape, generate and Graph build time, and per case
    the first call; ``rows``: one per case, precision and variant with the
    median ``step_ms`` (or the status that kept it from running). ``args``
    gives device, scale, seed, iters and warmup.
    """
    from pyg_ioaware import clear_graph_cache

    device = args.device
    ms, batches = time_once(lambda: generate_batches(size, args.scale, device, args.seed),
                            device)
    build = _guarded(lambda: graph_build(batches))
    info = {**batch_info(size, batches, args.scale), "generate_ms": ms,
            "build_ms": build.get("build_ms"), "graph_mb": build.get("graph_mb")}
    built = (f"Graph build {build['build_ms']:.2f} ms" if build["status"] == "ok" else
             f"Graph build {build['status']}: {build['detail']}")
    progress.note(f"mini-batch {size.name}: {info['seeds']} seeds, fanouts {list(size.fanouts)}, "
                  f"D={size.channels}: {info['num_nodes']:,.0f} nodes, "
                  f"{info['num_edges']:,.0f} edges, {built}")
    info["first_call"] = {}
    for case in cases:
        info["first_call"][case.name] = call = _guarded(lambda: first_call(case.make_ours,
                                                                           batches))
        clear_graph_cache()
        if call["status"] == "ok":
            progress.note(f"    {case.name}: first call {call['first_call_ms']:.2f} ms, "
                          f"repeated {call['repeat_call_ms']:.2f} ms")

    rows = []
    for case in cases:
        torch.manual_seed(args.seed)
        try:
            state = TwoLayer(case.make_ours, size.channels).state_dict()
        except Unsupported:  # our layer is missing: PyG's runs with its own weights
            state = None
        for precision in precisions:
            timers: Dict[str, StepTimer] = {}
            results: Dict[str, Dict[str, object]] = {}
            for variant, (layers, new_graph) in VARIANTS.items():
                make = case.make_ours if layers == "ours" else case.make_pyg

                def build(make=make, new_graph=new_graph, variant=variant) -> Dict[str, object]:
                    torch.manual_seed(args.seed)
                    model = TwoLayer(make, size.channels).to(device)
                    if state is not None:
                        model.load_state_dict(state)
                    timers[variant] = StepTimer(model, batches, precision, new_graph)
                    return {}

                built = _guarded(build)
                if built["status"] != "ok":
                    results[variant] = built
            progress.start(f"mini-batch {size.name} {case.name} {precision} "
                           f"({', '.join(timers)}, interleaved)")
            results.update(time_interleaved(timers, args.iters, args.warmup))
            del timers
            clear_graph_cache()
            free_memory(device)
            progress.finish(", ".join(
                f"{variant} {result['step_ms']:.3f} ms" if result["status"] == "ok" else
                f"{variant} {result['status']}: {result['detail']}"
                for variant, result in ((v, results[v]) for v in VARIANTS)))
            for variant in VARIANTS:
                result = results[variant]
                rows.append({"batch": size.name, "case": case.name, "key": case.key,
                             "family": case.family, "precision": precision, "impl": variant,
                             "step_ms": result.get("step_ms"), "status": result["status"],
                             "detail": result.get("detail")})
    del batches
    free_memory(device)
    return info, rows


def _guarded(fn: Callable[[], Dict[str, object]]) -> Dict[str, object]:
    """``fn()`` with status "ok", or the status of what it raised
    (:func:`_status`), so a long run goes on."""
    try:
        return {"status": "ok", **fn()}
    except Exception as error:
        return _status(error)


def _status(error: Exception) -> Dict[str, object]:
    """Status "unsupported" / "OOM" / "error" and a detail (called inside
    the ``except`` clause: an unexpected error's traceback is printed)."""
    if isinstance(error, Unsupported):
        return {"status": "unsupported", "detail": str(error)}
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return {"status": "OOM", "detail": oom_message(error)}
    traceback.print_exc()
    return {"status": "error", "detail": f"{type(error).__name__}: {error}"}
