"""The cached graph structure every layer dispatches on.

A :class:`Graph` is built once, on the input's device with torch ops, from
an ``edge_index`` (``[2, E]``, row 0 = source, row 1 = destination),
``torch_geometric.EdgeIndex``, a torch.sparse COO/CSR adjacency or a
``torch_sparse.SparseTensor`` (sparse inputs follow PyG's ``adj_t``
convention: rows are destinations, columns sources). It holds

* CSR by destination: ``rowptr`` [num_dst + 1], ``col`` [E] (sources), sorted
  by (destination, source);
* CSR^T by source: ``rowptr_t`` [num_src + 1], ``col_t`` [E] (destinations);
* ``edge_perm`` (CSR position -> input edge id) to carry edge weights and
  ``t_to_csr`` (CSR^T position -> CSR position) to carry CSR values;
* degrees, and per-graph state that ops cache (normalized values; the
  cuSPARSE plans live in ops.spmm_plan and are released with the Graph
  through :func:`register_release_hook`).

Index tensors are int32 while node and edge counts fit, else int64.
:meth:`Graph.from_input` finds the Graph of a tensor it has seen before
(same object, same version counter, same node counts) without any graph
work; the cache holds the tensor weakly, so nothing leaks.

Under torch.compile, building a Graph (and its derived caches) runs
eagerly (``torch.compiler.disable``); a Graph passed in whose caches are
filled traces with no graph break.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Optional, Tuple, Union

import torch
from torch import Tensor

NumNodes = Union[None, int, Tuple[int, int]]

INT32_LIMIT = 2**31 - 1
# Sort keys dst * num_src + src are int64: num_src * num_dst must stay below this.
MAX_KEY_SPACE = 2**62


class Graph:
    """A graph in CSR (by destination) and CSR^T (by source) form.

    Build with :meth:`from_input` (cached) or :meth:`from_edge_index`.
    """

    def __init__(self, *, rowptr: Tensor, col: Tensor, rowptr_t: Tensor, col_t: Tensor,
                 edge_perm: Tensor, t_to_csr: Tensor, num_src: int, num_dst: int,
                 edge_values: Optional[Tensor] = None):
        self.rowptr = mark_static(rowptr)
        self.col = mark_static(col)
        self.rowptr_t = mark_static(rowptr_t)
        self.col_t = mark_static(col_t)
        self.edge_perm = edge_perm
        self.t_to_csr = t_to_csr
        self.num_src = num_src
        self.num_dst = num_dst
        self.edge_values = edge_values
        # Per-graph caches filled lazily by the ops (keyed by the op's own keys).
        self.cache: dict = {}
        # Native state built on this structure (e.g. cuSPARSE plans) goes with it.
        weakref.finalize(self, _release_structures, (rowptr.data_ptr(), rowptr_t.data_ptr()))

    # ------------------------------------------------------------ properties
    @property
    def num_edges(self) -> int:
        return self.col.numel()

    @property
    def device(self) -> torch.device:
        return self.col.device

    @property
    def is_bipartite(self) -> bool:
        return self.num_src != self.num_dst

    @property
    def in_degree(self) -> Tensor:
        """Number of incoming edges of every destination node."""
        return self.rowptr.diff()

    @property
    def out_degree(self) -> Tensor:
        """Number of outgoing edges of every source node."""
        return self.rowptr_t.diff()

    @property
    def row(self) -> Tensor:
        """Destination of every CSR entry (cached)."""
        if "row" not in self.cache:
            self.cache["row"] = _expand_rowptr(self.rowptr, self.num_edges)
        return self.cache["row"]

    @property
    def nbytes(self) -> int:
        """Bytes held by the structure, every cached tensor and the derived
        graphs it caches (the self-loop graph)."""
        cached = _flatten(self.cache.values())
        tensors = [self.rowptr, self.col, self.rowptr_t, self.col_t, self.edge_perm,
                   self.t_to_csr, self.edge_values]
        tensors += [t for t in cached if isinstance(t, Tensor)]
        seen, total = set(), 0
        for t in tensors:
            if t is not None and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        return total + sum(g.nbytes for g in cached if isinstance(g, Graph))

    def __repr__(self) -> str:
        return (f"Graph(num_src={self.num_src}, num_dst={self.num_dst}, "
                f"num_edges={self.num_edges}, device={self.device})")

    # ---------------------------------------------------------- construction
    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: NumNodes = None,
                        edge_values: Optional[Tensor] = None) -> "Graph":
        """Builds a Graph from ``edge_index`` [2, E] (no caching).

        ``num_nodes`` is an int (square graph), a ``(num_src, num_dst)`` pair
        (bipartite), or None (``edge_index.max() + 1``, square).
        """
        _check_edge_index(edge_index)
        src, dst = edge_index[0], edge_index[1]
        num_src, num_dst = _resolve_num_nodes(src, dst, num_nodes)
        _check_index_range(src, num_src, "source (edge_index[0])")
        _check_index_range(dst, num_dst, "destination (edge_index[1])")
        if edge_values is not None and edge_values.size(0) != src.numel():
            raise ValueError(f"Graph: expected {src.numel()} edge values, got "
                             f"{edge_values.size(0)}")
        return cls._build(src.long(), dst.long(), num_src, num_dst, edge_values)

    @classmethod
    def from_input(cls, adj: Any, num_nodes: NumNodes = None) -> "Graph":
        """The Graph of ``adj`` (edge_index, EdgeIndex, torch.sparse tensor,
        SparseTensor or Graph), from the cache when ``adj`` was seen before."""
        if isinstance(adj, Graph):
            _check_graph_nodes(adj, num_nodes)
            return adj
        if isinstance(adj, Tensor):
            return _cached_graph(adj, num_nodes, cls._from_tensor)
        if _is_sparse_tensor(adj):
            return _cached_graph(adj, num_nodes, cls._from_sparse_tensor)
        raise TypeError(f"Graph: expected an edge_index tensor, EdgeIndex, torch.sparse tensor, "
                        f"SparseTensor or Graph, got {type(adj).__name__}")

    @classmethod
    def _from_tensor(cls, adj: Tensor, num_nodes: NumNodes) -> "Graph":
        if adj.layout in (torch.sparse_coo, torch.sparse_csr):
            return cls._from_torch_sparse(adj, num_nodes)
        if adj.layout != torch.strided:
            raise ValueError(f"Graph: unsupported sparse layout {adj.layout} "
                             f"(use COO, CSR or an edge_index)")
        if num_nodes is None:
            num_nodes = _edge_index_sparse_size(adj)
        return cls.from_edge_index(_plain_tensor(adj), num_nodes)

    @classmethod
    def _from_torch_sparse(cls, adj: Tensor, num_nodes: NumNodes) -> "Graph":
        if adj.dim() != 2:
            raise ValueError(f"Graph: expected a 2-D sparse adjacency, got {adj.dim()}-D")
        if adj.layout == torch.sparse_csr:
            dst = _expand_rowptr(adj.crow_indices(), adj.col_indices().numel())
            src, values = adj.col_indices(), adj.values()
        else:
            adj = adj.coalesce()
            dst, src = adj.indices()
            values = adj.values()
        edge_index = torch.stack([src.long(), dst.long()])
        size = (adj.size(1), adj.size(0))
        _check_sparse_size(size, num_nodes)
        return cls.from_edge_index(edge_index, size, edge_values=values)

    @classmethod
    def _from_sparse_tensor(cls, adj: Any, num_nodes: NumNodes) -> "Graph":
        dst, src, values = adj.coo()
        size = (adj.size(1), adj.size(0))
        _check_sparse_size(size, num_nodes)
        return cls.from_edge_index(torch.stack([src, dst]), size, edge_values=values)

    @classmethod
    def _build(cls, src: Tensor, dst: Tensor, num_src: int, num_dst: int,
               edge_values: Optional[Tensor]) -> "Graph":
        num_edges = src.numel()
        index_dtype = (torch.int32 if max(num_src, num_dst, num_edges) <= INT32_LIMIT
                       else torch.int64)
        # CSR by destination, entries sorted by (destination, source).
        edge_perm = torch.argsort(dst * num_src + src, stable=True)
        dst_sorted, src_sorted = dst[edge_perm], src[edge_perm]
        # CSR^T by source: CSR positions sorted by (source, destination).
        t_to_csr = torch.argsort(src_sorted * num_dst + dst_sorted, stable=True)
        return cls(
            rowptr=_rowptr(dst, num_dst, index_dtype),
            col=src_sorted.to(index_dtype),
            rowptr_t=_rowptr(src, num_src, index_dtype),
            col_t=dst_sorted[t_to_csr].to(index_dtype),
            edge_perm=edge_perm.to(index_dtype),
            t_to_csr=t_to_csr.to(index_dtype),
            num_src=num_src,
            num_dst=num_dst,
            edge_values=edge_values,
        )

    # ------------------------------------------------------- derived graphs
    def with_remaining_self_loops(self) -> "Graph":
        """PyG's ``add_remaining_self_loops``: every existing self loop is
        dropped and exactly one loop per node added (cached).

        The result's ``cache["edge_origin"]`` maps each of its CSR entries to
        the input edge id whose weight it carries: the edge itself, the last
        self loop of that node in the input, or -1 (a new loop, which gets
        the fill value). Its ``edge_perm`` indexes its own construction
        order, not the input edges: carry weights through ``edge_origin``.
        """
        if "self_loop_graph" not in self.cache:
            self.cache["self_loop_graph"] = self._build_self_loop_graph()
        return self.cache["self_loop_graph"]

    @torch.compiler.disable
    def _build_self_loop_graph(self) -> "Graph":
        if self.is_bipartite:
            raise ValueError(f"Graph: self loops need a square graph, got num_src={self.num_src}"
                             f" and num_dst={self.num_dst}")
        n, device = self.num_dst, self.device
        src, dst = self.col.long(), self.row.long()
        input_id = self.edge_perm.long()
        is_loop = src == dst
        last_loop = torch.full((n,), -1, dtype=torch.long, device=device)
        last_loop.scatter_reduce_(0, dst[is_loop], input_id[is_loop], reduce="amax")
        nodes = torch.arange(n, device=device)
        keep = ~is_loop
        new_src = torch.cat([src[keep], nodes])
        new_dst = torch.cat([dst[keep], nodes])
        origin = torch.cat([input_id[keep], last_loop])
        looped = Graph._build(new_src, new_dst, n, n, None)
        looped.cache["edge_origin"] = origin[looped.edge_perm.long()]
        return looped


# ---------------------------------------------------------------- the cache
class _GraphCache:
    """Graphs of tensors seen before, keyed by the tensor's identity.

    An entry is valid while the tensor lives and its version counter and the
    requested node counts are unchanged; it is dropped when the tensor dies.
    """

    def __init__(self):
        self._entries: dict[int, dict] = {}

    def lookup(self, adj: Any, num_nodes: NumNodes,
               build: Callable[[Any, NumNodes], Graph]) -> Graph:
        key = id(adj)
        version = _version_of(adj)
        if isinstance(num_nodes, list):
            num_nodes = tuple(num_nodes)
        per_tensor = self._entries.get(key)
        if per_tensor is not None and per_tensor["ref"]() is adj:
            graph = per_tensor["graphs"].get((version, num_nodes))
            if graph is not None:
                return graph
        graph = build(adj, num_nodes)
        if per_tensor is None or per_tensor["ref"]() is not adj:
            per_tensor = {"ref": weakref.ref(adj, self._forget(key)), "graphs": {}}
            self._entries[key] = per_tensor
        # Keep only the current version's graphs.
        per_tensor["graphs"] = {k: g for k, g in per_tensor["graphs"].items() if k[0] == version}
        per_tensor["graphs"][(version, num_nodes)] = graph
        return graph

    def _forget(self, key: int) -> Callable[[Any], None]:
        def callback(ref: Any) -> None:
            entry = self._entries.get(key)
            if entry is not None and entry["ref"] is ref:
                del self._entries[key]
        return callback

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


_GRAPH_CACHE = _GraphCache()
# The cache works on object identity, which torch.compile cannot trace: under
# compilation the lookup runs eagerly (one graph break). Eager calls skip that
# wrapper, whose cost would show on small graphs.
_eager_lookup = torch.compiler.disable(_GRAPH_CACHE.lookup)


def _cached_graph(adj: Any, num_nodes: NumNodes, build: Callable[[Any, NumNodes], Graph]) -> Graph:
    if torch.compiler.is_compiling():
        return _eager_lookup(adj, num_nodes, build)
    return _GRAPH_CACHE.lookup(adj, num_nodes, build)


def clear_graph_cache() -> None:
    """Drops every cached Graph."""
    _GRAPH_CACHE.clear()


# --------------------------------------------------- release of native state
_RELEASE_HOOKS: list = []


def register_release_hook(hook: Callable[[int], None]) -> None:
    """``hook(rowptr_pointer)`` runs for the CSR and the CSR^T rowptr of
    every Graph that is garbage-collected (ops drop state built on them)."""
    _RELEASE_HOOKS.append(hook)


def _release_structures(rowptr_pointers: Tuple[int, ...]) -> None:
    for hook in _RELEASE_HOOKS:
        for pointer in rowptr_pointers:
            hook(pointer)


# ------------------------------------------------------------------ helpers
def mark_static(tensor: Tensor) -> Tensor:
    """Tells torch.compile the tensor keeps its address: CUDA-graph trees then
    use it in place instead of copying it into their pool each replay (the
    native plans are keyed by these addresses). Not guarded, so a new Graph
    does not recompile."""
    torch._dynamo.mark_static_address(tensor, guard=False)
    return tensor




def _flatten(values) -> list:
    out = []
    for v in values:
        if isinstance(v, (tuple, list)):
            out += _flatten(v)
        elif isinstance(v, dict):
            out += _flatten(v.values())
        else:
            out.append(v)
    return out


def _rowptr(index: Tensor, num_rows: int, dtype: torch.dtype) -> Tensor:
    rowptr = torch.zeros(num_rows + 1, dtype=torch.long, device=index.device)
    torch.cumsum(torch.bincount(index, minlength=num_rows), 0, out=rowptr[1:])
    return rowptr.to(dtype)


def _expand_rowptr(rowptr: Tensor, num_entries: int) -> Tensor:
    """Row index of every CSR entry."""
    rows = torch.arange(rowptr.numel() - 1, device=rowptr.device, dtype=rowptr.dtype)
    return torch.repeat_interleave(rows, rowptr.diff(), output_size=num_entries)


def _version_of(adj: Any) -> int:
    if isinstance(adj, Tensor):
        return adj._version
    return sum(t._version for t in adj.coo() if t is not None)  # SparseTensor


def _is_sparse_tensor(adj: Any) -> bool:
    return type(adj).__name__ == "SparseTensor" and hasattr(adj, "coo")


def _plain_tensor(edge_index: Tensor) -> Tensor:
    """An EdgeIndex as a plain tensor (other tensors unchanged)."""
    as_tensor = getattr(edge_index, "as_tensor", None)
    return as_tensor() if callable(as_tensor) else edge_index


def _edge_index_sparse_size(edge_index: Tensor) -> NumNodes:
    """(num_src, num_dst) recorded on a torch_geometric.EdgeIndex, if any."""
    sparse_size = getattr(edge_index, "sparse_size", None)
    if not callable(sparse_size):
        return None
    num_src, num_dst = sparse_size()
    if num_src is None or num_dst is None:
        return None
    return num_src if num_src == num_dst else (num_src, num_dst)


def _check_edge_index(edge_index: Tensor) -> None:
    if edge_index.is_floating_point() or edge_index.is_complex() or \
            edge_index.dtype == torch.bool:
        raise TypeError(f"Graph: edge_index must be an integer tensor (int32 or int64), "
                        f"got {edge_index.dtype}")
    if edge_index.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"Graph: edge_index must be int32 or int64, got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"Graph: edge_index must have shape [2, num_edges], "
                         f"got {list(edge_index.shape)}")


def _resolve_num_nodes(src: Tensor, dst: Tensor, num_nodes: NumNodes) -> Tuple[int, int]:
    if num_nodes is None:
        n = int(torch.maximum(src.max(), dst.max())) + 1 if src.numel() > 0 else 0
        return n, n
    if isinstance(num_nodes, (tuple, list)):
        if len(num_nodes) != 2:
            raise ValueError(f"Graph: num_nodes must be an int or (num_src, num_dst), "
                             f"got {num_nodes}")
        num_src, num_dst = (int(v) for v in num_nodes)
    else:
        num_src = num_dst = int(num_nodes)
    if min(num_src, num_dst) < 0:
        raise ValueError(f"Graph: node counts must be non-negative, got ({num_src}, {num_dst})")
    if num_src * num_dst >= MAX_KEY_SPACE:
        raise ValueError(f"Graph: {num_src} x {num_dst} nodes is beyond what the int64 CSR "
                         f"sort keys support (num_src * num_dst < 2^62)")
    return num_src, num_dst


def _check_index_range(index: Tensor, size: int, what: str) -> None:
    if index.numel() == 0:
        return
    low, high = int(index.min()), int(index.max())
    if low < 0:
        raise ValueError(f"Graph: {what} index {low} is negative")
    if high >= size:
        raise ValueError(f"Graph: {what} index {high} is out of range for {size} nodes")


def _check_sparse_size(size: Tuple[int, int], num_nodes: NumNodes) -> None:
    if num_nodes is None:
        return
    expected = tuple(num_nodes) if isinstance(num_nodes, (tuple, list)) else (num_nodes,) * 2
    if tuple(size) != expected:
        raise ValueError(f"Graph: sparse adjacency has (num_src, num_dst) = {tuple(size)}, "
                         f"expected {expected}")


def _check_graph_nodes(graph: Graph, num_nodes: NumNodes) -> None:
    if num_nodes is None:
        return
    expected = tuple(num_nodes) if isinstance(num_nodes, (tuple, list)) else (num_nodes,) * 2
    if (graph.num_src, graph.num_dst) != expected:
        raise ValueError(f"Graph: graph has (num_src, num_dst) = "
                         f"{(graph.num_src, graph.num_dst)}, expected {expected}")
