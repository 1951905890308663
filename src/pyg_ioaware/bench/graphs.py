"""The synthetic graph suite of docs/benchmark_protocol.md.

Every graph is generated with torch on the target device from a fixed seed:
R-MAT (drawn level by level, vectorized over all edges), a 2-D grid with
randomly kept neighbour edges, or dense communities. Self loops and duplicate
edges are removed, node ids are relabelled with a seeded permutation, and the
edges are returned coalesced (sorted by source, then destination), the form
PyG datasets ship in. The same seed on the same device gives the same graph.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import torch
from torch import Tensor

# A graph generator: (num_nodes, num_edges, generator) -> (src, dst), unique
# edges without self loops, before relabelling. num_edges is a target.
Generator = Callable[[int, int, torch.Generator], Tuple[Tensor, Tensor]]

MIN_NODES = 16
# Sampling stops at this share of all the distinct edges a generator can
# produce, so a scaled-down target stays reachable.
MAX_FILL = 0.5


@dataclass(frozen=True)
class GraphSpec:
    """One suite graph: name, full-size node and edge counts, generator.

    ``square``: the node count is rounded to a square (grids)."""
    name: str
    num_nodes: int
    num_edges: int
    generate: Generator
    square: bool = False


def rmat(a: float, b: float, c: float) -> Generator:
    """R-MAT with quadrant probabilities (a, b, c, 1 - a - b - c)."""

    def generate(num_nodes: int, num_edges: int, gen: torch.Generator):
        levels = max(1, math.ceil(math.log2(num_nodes)))

        def draw(count: int) -> Tuple[Tensor, Tensor]:
            src = torch.zeros(count, dtype=torch.long, device=gen.device)
            dst = torch.zeros_like(src)
            for _ in range(levels):
                u = torch.rand(count, generator=gen, device=gen.device)
                # Quadrants a | b | c | d: c and d set the source bit, b and d
                # the destination bit.
                src = src * 2 + (u >= a + b)
                dst = dst * 2 + (((u >= a) & (u < a + b)) | (u >= a + b + c))
            # 2**levels may exceed num_nodes: drop ids out of range.
            keep = (src < num_nodes) & (dst < num_nodes)
            return src[keep], dst[keep]

        return _sample_unique(draw, num_nodes, num_edges, gen, num_nodes * (num_nodes - 1))

    return generate


def grid(keep: float) -> Generator:
    """A square 2-D grid; each directed edge to one of the 4 neighbours is kept
    with probability ``keep``. num_edges is ignored (it follows from ``keep``)."""

    def generate(num_nodes: int, num_edges: int, gen: torch.Generator):
        side = math.isqrt(num_nodes)
        node = torch.arange(side * side, device=gen.device).view(side, side)
        left, right = node[:, :-1].reshape(-1), node[:, 1:].reshape(-1)
        up, down = node[:-1, :].reshape(-1), node[1:, :].reshape(-1)
        src = torch.cat([left, right, up, down])
        dst = torch.cat([right, left, down, up])
        kept = torch.rand(src.numel(), generator=gen, device=gen.device) < keep
        return src[kept], dst[kept]

    return generate


def communities(num_communities: int, inside: float) -> Generator:
    """Equal-size communities; a share ``inside`` of the edges join two nodes of
    the same community, the rest join nodes of different communities."""

    def generate(num_nodes: int, num_edges: int, gen: torch.Generator):
        device = gen.device
        count = max(1, min(num_communities, num_nodes // MIN_NODES))
        # Community k holds the nodes [start[k], start[k + 1]).
        start = torch.arange(count + 1, device=device) * num_nodes // count
        size = start.diff()
        community = torch.repeat_interleave(torch.arange(count, device=device), size)

        def draw_inside(k: int) -> Tuple[Tensor, Tensor]:
            src = torch.randint(num_nodes, (k,), generator=gen, device=device)
            c = community[src]
            offset = torch.rand(k, generator=gen, device=device) * size[c]
            return src, start[c] + offset.long().clamp_max(size[c] - 1)

        def draw_across(k: int) -> Tuple[Tensor, Tensor]:
            src = torch.randint(num_nodes, (k,), generator=gen, device=device)
            dst = torch.randint(num_nodes, (k,), generator=gen, device=device)
            keep = community[src] != community[dst]
            return src[keep], dst[keep]

        if count == 1:
            return _sample_unique(draw_inside, num_nodes, num_edges, gen,
                                  num_nodes * (num_nodes - 1))
        num_inside = round(inside * num_edges)
        same = int((size * size).sum())
        src_in, dst_in = _sample_unique(draw_inside, num_nodes, num_inside, gen,
                                        same - num_nodes)
        src_out, dst_out = _sample_unique(draw_across, num_nodes, num_edges - num_inside, gen,
                                          num_nodes * num_nodes - same)
        return torch.cat([src_in, src_out]), torch.cat([dst_in, dst_out])

    return generate


SUITE: Dict[str, GraphSpec] = {spec.name: spec for spec in [
    GraphSpec("arxiv-like", 169_343, 1_166_243, rmat(0.57, 0.19, 0.19)),
    GraphSpec("roads-like", 142_129, 277_000, grid(0.49), square=True),
    GraphSpec("tolokers-like", 11_758, 1_038_000, communities(64, 0.9)),
    GraphSpec("pokec-like", 1_632_803, 30_622_564, rmat(0.45, 0.22, 0.22)),
    GraphSpec("web-like", 2_890_331, 12_895_369, rmat(0.65, 0.15, 0.15)),
    GraphSpec("products-like", 2_449_029, 61_859_140, rmat(0.45, 0.22, 0.22)),
]}

QUICK = ("arxiv-like", "roads-like", "tolokers-like")


def scaled_size(name: str, scale: float = 1.0) -> Tuple[int, int]:
    """Target (num_nodes, num_edges) of a suite graph with its node and edge
    counts multiplied by ``scale`` (0.1 = a tenth); the node count is exact
    (at least MIN_NODES, a square for grids), the edge count a target."""
    spec = SUITE[name]
    num_nodes = max(MIN_NODES, round(spec.num_nodes * scale))
    if spec.square:
        num_nodes = max(4, round(math.sqrt(num_nodes))) ** 2
    return num_nodes, max(1, round(spec.num_edges * scale))


def generate(name: str, scale: float = 1.0, device: torch.device | str = "cpu",
             seed: int = 0) -> Tuple[Tensor, int]:
    """Generate a suite graph at ``scale`` times its size (see
    :func:`scaled_size`): ``(edge_index [2, E] int64, num_nodes)``."""
    if name not in SUITE:
        raise ValueError(f"unknown graph {name!r}; expected one of {sorted(SUITE)}")
    num_nodes, num_edges = scaled_size(name, scale)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    src, dst = SUITE[name].generate(num_nodes, num_edges, gen)
    perm = torch.randperm(num_nodes, generator=gen, device=gen.device)
    key = (perm[src] * num_nodes + perm[dst]).sort().values
    del src, dst, perm
    return torch.stack([key // num_nodes, key % num_nodes]), num_nodes


def _sample_unique(draw: Callable[[int], Tuple[Tensor, Tensor]], num_nodes: int,
                   num_edges: int, gen: torch.Generator, capacity: int,
                   max_rounds: int = 16) -> Tuple[Tensor, Tensor]:
    """Draw edges until ``num_edges`` distinct non-loop edges are found and keep
    a random subset of exactly that many (fewer if ``max_rounds`` run out).

    ``draw(k)`` returns up to k candidate edges; ``capacity`` is the number of
    distinct non-loop edges it can produce.
    """
    num_edges = min(num_edges, int(MAX_FILL * capacity))
    keys = torch.empty(0, dtype=torch.long, device=gen.device)
    drawn = 0
    for _ in range(max_rounds):
        missing = num_edges - keys.numel()
        if missing <= 0:
            break
        # Distinct edges found per edge drawn so far: falls as duplicates grow.
        found = keys.numel() / drawn if drawn else 1.0
        count = min(int(missing / max(found, 0.05) * 1.05), 4 * num_edges) + 64
        src, dst = draw(count)
        drawn += count
        ok = src != dst
        keys = torch.cat([keys, src[ok] * num_nodes + dst[ok]]).unique()
        del src, dst, ok
    keep = torch.randperm(keys.numel(), generator=gen, device=gen.device)[:num_edges]
    keys = keys[keep]
    return keys // num_nodes, keys % num_nodes
