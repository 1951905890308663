"""The cached graph structure every layer dispatches on.

A :class:`Graph` is built once, on the input's device with torch ops, from
an ``edge_index`` (``[2, E]``, row 0 = source, row 1 = destination),
``torch_geometric.EdgeIndex``, a torch.sparse COO/CSR adjacency or a
``torch_sparse.SparseTensor`` (sparse inputs follow PyG's ``adj_t``
convention: rows are destinations, columns sources).

Building it costs at most one sort and exactly one host synchronisation
(the index-range check, which also finds out whether the edges are already
grouped by destination, as PyG's neighbour samplers emit them; then no sort
runs at all, and the largest in-degree comes with it: ``degree_bound``). On
CUDA, with the node counts given, that check writes the grouped case's CSR
in the same launch: a sampler's graph is built by one kernel.
Layers start that read before their projections (:func:`prefetch`) and
wait for it after them, so the GPU keeps working meanwhile. It holds CSR
by destination:

* ``rowptr`` [num_dst + 1], ``col`` [E] (sources) and ``row`` [E]
  (destinations), entries grouped by destination in input order within a
  destination;
* ``edge_perm`` (CSR position -> input edge id; None when the input was
  already grouped, i.e. the identity);
* ``input_values``: the sparse input's values (input edge order), if any.

Everything else is derived lazily, the first time something needs it, and
kept on :attr:`Graph.state` (a :class:`GraphState`): the CSR^T by source
(one more sort, native on CUDA, built when a backward needs A^T), the
graph with PyG's remaining self loops (no sort), normalized edge values
and native plans.
All of it is released with the Graph and counted by :attr:`Graph.nbytes`.

Index tensors are int32 while node and edge counts fit, else int64.
:meth:`Graph.from_input` finds the Graph of a tensor it has seen before
(same object, same version counter, same node counts) without any graph
work; the cache holds the tensor weakly, so nothing leaks.

Under torch.compile, building a Graph (and its derived state) runs eagerly
(``torch.compiler.disable``); a Graph passed in whose state is filled traces
with no graph break.
"""
from __future__ import annotations

import operator
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from . import _native, config

NumNodes = Union[None, int, Tuple[int, int]]

INT32_LIMIT = 2**31 - 1

# edge_origin codes of a self-loop graph's entries that carry no input edge.
NEW_LOOP = -1  # an added self loop: weight = the fill value
DROPPED_LOOP = -2  # an input self loop replaced by the added one: weight 0


@dataclass
class Transpose:
    """CSR^T of a Graph (rows = sources): ``rowptr`` [num_src + 1], ``col``
    [E] (destinations), ``row`` [E] (sources), ``perm`` (CSR^T position ->
    CSR position)."""
    rowptr: Tensor
    col: Tensor
    row: Tensor
    perm: Tensor


@dataclass
class GraphState:
    """Derived state of a Graph, filled lazily by whoever needs it.

    ``transpose``: the CSR^T; ``self_loop_graph``: the graph with PyG's
    remaining self loops; ``reversed_graph``: every edge reversed;
    ``first_backward_task``: the autograd run of the first backward pass
    through this graph (ops.spmm.LazyTranspose); ``edge_origin`` (on a
    self-loop graph only): per CSR entry the input edge id of the graph it
    derives from, NEW_LOOP or DROPPED_LOOP; ``dropped_loops`` (with
    ``edge_origin``): False where no entry can be DROPPED_LOOP (the input
    had no self loop); ``attention_graphs``: per number of self loops, the
    graph attention layers run on (input self loops removed, one loop added
    per node below that number), its edge_index in PyG's order and the input
    edges it keeps (nn.GATv2Conv); ``values``: normalized edge values per
    (mode, dtype), filled by ops.normalize; ``gcn_values`` (on a self-loop
    graph only): float32 GCN values without weights that the build wrote
    with the structure (``Graph.from_input(..., gcn_values=True)``), until
    ops.normalize takes them into ``values``; ``native_spmm_calls``: the C++
    SpMM calls resolved over the cached ``values`` (ops.spmm.native_spmm_call,
    keyed by the values' identity, the features' dtype and width and the
    backward's flags), which hold the graph's tensors and no Graph. (The
    SpMM backends' plans live beside the structure, in ``StructureState``.)
    """
    transpose: Optional[Transpose] = None
    self_loop_graph: Optional["Graph"] = None
    reversed_graph: Optional["Graph"] = None
    first_backward_task: Optional[int] = None
    edge_origin: Optional[Tensor] = None
    dropped_loops: bool = True
    attention_graphs: Dict[int, Tuple["Graph", Tensor, Tensor]] = field(default_factory=dict)
    values: Dict[Tuple[str, torch.dtype], Any] = field(default_factory=dict)
    gcn_values: Optional[Tensor] = None
    native_spmm_calls: Dict[tuple, Any] = field(default_factory=dict)


class Graph:
    """A graph in CSR form by destination; CSR^T and other views on demand.

    Every layer and op turns its adjacency input into a Graph; build one
    yourself with :meth:`from_input` (cached: the same unchanged
    ``edge_index`` tensor gives the same Graph) or :meth:`from_edge_index`
    (no cache), and pass it to layers and ops in place of ``edge_index`` to
    skip even the cache lookup (and for torch.compile without graph breaks).

    Building one costs one host synchronisation (the index-range check) and
    at most one stable sort by destination (none when the edges come
    grouped by destination, as PyG's samplers emit them). Everything else
    (the CSR^T, the graph with self loops, normalized edge values, native
    kernel plans) is derived the first time something needs it and kept in
    :attr:`state` for as long as the Graph lives.

    Attributes:
        rowptr (Tensor): [num_dst + 1] CSR row pointers (rows = destinations).
        col (Tensor): [E] source of every CSR entry.
        row (Tensor): [E] destination of every CSR entry.
        num_src (int): number of source nodes.
        num_dst (int): number of destination nodes (``== num_src`` for a
            square graph).
        edge_perm (Tensor or None): CSR position -> input edge id (None: the
            input was already grouped by destination).
        input_values (Tensor or None): a sparse input's values, in input
            edge order.
        self_loops (int or None): input edges with source == destination
            (None: not known), as the build's index statistics found them.
        degree_bound (int or None): no destination has more entries than
            this (None: not known). Known where the build saw it for free
            (edges grouped by destination, as samplers emit them); kernels
            skip their hub splitting where it is small. Otherwise the first
            SpMM over the Graph starts reading it without a wait, and the
            kernels find it beside the structure for the calls after
            (StructureState.known_degree_bound).
        state (pyg_ioaware.graph.GraphState): the lazily derived state.

    Index tensors are int32 while node and edge counts fit, else int64.

    Example::

        graph = Graph.from_input(edge_index, num_nodes=x.size(0))
        out = conv(x, graph)              # any pyg_ioaware layer or op
        graph.transpose                   # CSR^T, built once
        print(graph.nbytes)               # memory held, derived state included
    """

    def __init__(self, *, rowptr: Tensor, col: Tensor, row: Tensor, num_src: int, num_dst: int,
                 edge_perm: Optional[Tensor] = None, input_values: Optional[Tensor] = None,
                 degree_bound: Optional[int] = None):
        self.rowptr = mark_static(rowptr)
        self.col = mark_static(col)
        self.row = row
        self.edge_perm = edge_perm
        self.num_src = num_src
        self.num_dst = num_dst
        self.input_values = input_values
        self.degree_bound = degree_bound
        self.self_loops: Optional[int] = None
        self.state = GraphState()
        structure = trust_csr(self.rowptr, self.col, num_src)
        # The kernels' hub splitting reads the bound beside the structure (or
        # requests it); a Graph over a structure that already learned one
        # (reversed(), over the CSR^T) keeps it.
        if degree_bound is not None:
            structure.degree_bound = degree_bound

    # ------------------------------------------------------------ properties
    @property
    def num_edges(self) -> int:
        return self.col.numel()

    @property
    def device(self) -> torch.device:
        return self.col.device

    @property
    def index_dtype(self) -> torch.dtype:
        return self.col.dtype

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
        return self.transpose.rowptr.diff()

    @property
    def transpose(self) -> Transpose:
        """CSR^T by source, built on first use (one stable sort) and kept."""
        if self.state.transpose is None:
            self.state.transpose = self._build_transpose()
        return self.state.transpose

    @property
    def nbytes(self) -> int:
        """Bytes held by the structure and all its derived state (the
        self-loop graph included)."""
        state = self.state
        tensors = [self.rowptr, self.col, self.row, self.edge_perm, self.input_values,
                   state.edge_origin, state.gcn_values]
        if state.transpose is not None:
            t = state.transpose
            tensors += [t.rowptr, t.col, t.row, t.perm]
        for values in state.values.values():
            tensors += values.tensors()
        seen, total = set(), 0
        for t in tensors:
            if t is not None and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        for rowptr in (self.rowptr, None if state.transpose is None else state.transpose.rowptr):
            native = None if rowptr is None else known_structure_state(rowptr)
            total += 0 if native is None else sum(p.nbytes for p in native.plans.values())
        for derived in (state.self_loop_graph, state.reversed_graph):
            if derived is not None:
                total += derived.nbytes
        return total

    def __repr__(self) -> str:
        return (f"Graph(num_src={self.num_src}, num_dst={self.num_dst}, "
                f"num_edges={self.num_edges}, device={self.device})")

    # ---------------------------------------------------------- construction
    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: NumNodes = None,
                        input_values: Optional[Tensor] = None) -> "Graph":
        """Builds a Graph from ``edge_index`` [2, E] (no caching).

        ``num_nodes`` is an int (square graph), a ``(num_src, num_dst)`` pair
        (bipartite), or None (``edge_index.max() + 1``, square).
        """
        return cls._from_edge_index(edge_index, num_nodes, input_values)

    @classmethod
    def _from_edge_index(cls, edge_index: Tensor, num_nodes: NumNodes = None,
                         input_values: Optional[Tensor] = None, self_loops: bool = False,
                         gcn_values: bool = False) -> "Graph":
        """:meth:`from_edge_index`; with ``self_loops``, a square graph's
        :meth:`with_remaining_self_loops` is built in the same native call
        where the edges come grouped (CUDA), else left to its first use;
        with ``gcn_values`` too, that call also writes its GCN values
        without weights where the input holds no self loop
        (``GraphState.gcn_values``)."""
        _check_edge_index(edge_index)
        num_edges = edge_index.size(1)
        if input_values is not None and input_values.size(0) != num_edges:
            raise ValueError(f"Graph: expected {num_edges} edge values, got "
                             f"{input_values.size(0)}")
        if num_edges == 0:
            num_src, num_dst = _resolve_num_nodes(num_nodes, 0)
            graph = cls._build(edge_index, num_src, num_dst, input_values, grouped=True,
                               degree_bound=0)
            graph.self_loops = 0
            return graph
        num_src = num_dst = None
        if num_nodes is not None:
            num_src, num_dst = _resolve_num_nodes(num_nodes, 0)
        csr = looped = None
        if num_dst and _native_build(edge_index) and id(edge_index) not in _STATS_IN_FLIGHT:
            # One launch: the statistics and, in the same pass, the CSR as if
            # the edges were grouped (kept by _build where they are). Without
            # destinations every edge is out of range: the check below says so.
            index_dtype = _index_dtype(num_src, num_dst, num_edges)
            # Built natively only where it keeps the index dtype (as on first use).
            loops = (self_loops and num_src == num_dst
                     and _self_loop_index_dtype(num_dst, num_edges) == index_dtype)
            stats, csr, looped = _native.grouped_graph(
                edge_index, num_src, num_dst, index_dtype,
                entries=not _index_views(edge_index, index_dtype), self_loops=loops,
                gcn_values=gcn_values)
        else:
            stats = _index_stats(edge_index)  # the one host synchronisation
            num_src, num_dst = _resolve_num_nodes(num_nodes,
                                                  max(stats.max_src, stats.max_dst) + 1)
        _check_index_range(stats, num_src, num_dst)
        graph = cls._build(edge_index, num_src, num_dst, input_values, stats.grouped,
                           stats.longest_run if stats.grouped else None, csr)
        graph.self_loops = stats.self_loops
        if looped is not None:
            graph.state.self_loop_graph = graph._self_loop_graph_of(*looped)
        return graph

    @classmethod
    def with_pyg_self_loops(cls, adj: Tensor,
                            num_nodes: Tuple[int, int]) -> Tuple["Graph", Tensor, Tensor]:
        """(graph, edge_index, kept): ``adj`` (an edge_index or EdgeIndex of
        num_nodes = (num_src, num_dst)) after PyG's remove_self_loops +
        add_self_loops (one loop per node below min(num_src, num_dst)), as
        GATConv-like layers see it: ``edge_index`` the kept input edges in
        input order then the loops, ``kept`` their input ids, ``graph`` its
        Graph. Cached on ``adj`` like :meth:`from_input`; built with one host
        synchronisation (index range and loop count read together) and one
        native call where the edges come grouped by destination (CUDA), else
        one sort, without building ``adj``'s own CSR."""
        return _cached_graph(adj, num_nodes, _pyg_self_looped, variant="pyg_self_loops")

    @classmethod
    def from_input(cls, adj: Any, num_nodes: NumNodes = None, *,
                   with_self_loops: bool = False, gcn_values: bool = False) -> "Graph":
        """The Graph of ``adj``, from the cache when ``adj`` was seen before.

        Args:
            adj: ``edge_index`` [2, E] (int32 or int64; row 0 = source),
                ``torch_geometric.EdgeIndex``, a torch.sparse COO or CSR
                adjacency or a ``torch_sparse.SparseTensor`` (PyG's ``adj_t``
                convention: rows are destinations; values become edge
                weights), or a Graph (returned as it is).
            num_nodes: an int (square graph), ``(num_src, num_dst)``
                (bipartite), or None (inferred: an EdgeIndex's or sparse
                tensor's size, else ``edge_index.max() + 1``).
            with_self_loops (bool): where this call builds the Graph, also
                build its :meth:`with_remaining_self_loops` (GCN's graph): in
                the same native call where the edges come grouped by
                destination (CUDA), one host call fewer for a new graph.
                The Graph returned is ``adj``'s either way.
            gcn_values (bool): with ``with_self_loops``, that native call
                also writes the self-loop graph's float32 GCN values without
                edge weights (where the input holds no self loop), which
                ops.normalize then takes instead of computing them.

        The cache is keyed by the tensor's identity, its version counter
        and the node counts, and holds tensors weakly: an in-place change
        of ``edge_index`` gives a new Graph, and a Graph goes when its
        ``edge_index`` is freed.

        Raises:
            ValueError: an index out of range or negative, a wrong shape, a
                sparse size that disagrees with ``num_nodes``.
            TypeError: an index tensor that is not int32 or int64.
        """
        if isinstance(adj, Graph):
            _check_graph_nodes(adj, num_nodes)
            return adj
        if isinstance(adj, Tensor):
            build = (cls._from_tensor if not with_self_loops else
                     cls._from_tensor_gcn if gcn_values else cls._from_tensor_self_looped)
            return _cached_graph(adj, num_nodes, build)
        if _is_sparse_tensor(adj):
            return _cached_graph(adj, num_nodes, cls._from_sparse_tensor)
        raise TypeError(f"Graph: expected an edge_index tensor, EdgeIndex, torch.sparse tensor, "
                        f"SparseTensor or Graph, got {type(adj).__name__}")

    @classmethod
    def _from_tensor(cls, adj: Tensor, num_nodes: NumNodes, self_loops: bool = False,
                     gcn_values: bool = False) -> "Graph":
        if adj.layout in (torch.sparse_coo, torch.sparse_csr):
            return cls._from_torch_sparse(adj, num_nodes)
        if adj.layout != torch.strided:
            raise ValueError(f"Graph: unsupported sparse layout {adj.layout} "
                             f"(use COO, CSR or an edge_index)")
        if num_nodes is None:
            num_nodes = _edge_index_sparse_size(adj)
        return cls._from_edge_index(_plain_tensor(adj), num_nodes, self_loops=self_loops,
                                    gcn_values=gcn_values)

    @classmethod
    def _from_tensor_self_looped(cls, adj: Tensor, num_nodes: NumNodes) -> "Graph":
        return cls._from_tensor(adj, num_nodes, self_loops=True)

    @classmethod
    def _from_tensor_gcn(cls, adj: Tensor, num_nodes: NumNodes) -> "Graph":
        return cls._from_tensor(adj, num_nodes, self_loops=True, gcn_values=True)

    @classmethod
    def _from_torch_sparse(cls, adj: Tensor, num_nodes: NumNodes) -> "Graph":
        if adj.dim() != 2:
            raise ValueError(f"Graph: expected a 2-D sparse adjacency, got {adj.dim()}-D")
        size = (adj.size(1), adj.size(0))
        _check_sparse_size(size, num_nodes)
        if adj.layout == torch.sparse_csr:
            crow, src = adj.crow_indices(), adj.col_indices().long()
            dst = entry_rows(crow, src.numel())
            values = adj.values()
        else:
            adj = adj.coalesce()  # sorted by (row = destination, column)
            dst, src = adj.indices()
            values = adj.values()
        return cls.from_edge_index(torch.stack([src, dst]), size, input_values=values)

    @classmethod
    def _from_sparse_tensor(cls, adj: Any, num_nodes: NumNodes) -> "Graph":
        dst, src, values = adj.coo()  # row-major: grouped by destination
        size = (adj.size(1), adj.size(0))
        _check_sparse_size(size, num_nodes)
        return cls.from_edge_index(torch.stack([src, dst]), size, input_values=values)

    @classmethod
    def _build(cls, edge_index: Tensor, num_src: int, num_dst: int,
               input_values: Optional[Tensor], grouped: bool,
               degree_bound: Optional[int] = None, csr: Optional[list] = None) -> "Graph":
        """CSR by destination from an edge_index whose range is checked:
        one stable sort by destination unless ``grouped``; ``degree_bound``
        as the Graph keeps it. ``csr``: what the statistics' launch wrote as
        if the edges were grouped ([rowptr], or [rowptr, col, row] where the
        indices are no views of edge_index), used where they are."""
        index_dtype = _index_dtype(num_src, num_dst, edge_index.size(1))
        views = _index_views(edge_index, index_dtype)
        if grouped and (csr is not None or (_native_build(edge_index) and not views)):
            if csr is None:  # one launch for rowptr, col and row (the torch ops below take five)
                csr = _native.csr_from_grouped(edge_index, num_dst, index_dtype)
            rowptr, col, row = (csr[0], edge_index[0], edge_index[1]) if views else csr
            return cls(rowptr=rowptr, col=col, row=row, num_src=num_src, num_dst=num_dst,
                       input_values=input_values, degree_bound=degree_bound)
        src, dst = edge_index[0], edge_index[1]
        edge_perm = None
        if grouped:  # int64 rows kept as they are, without a copy
            row = dst.to(index_dtype).contiguous()
            col = src.to(index_dtype).contiguous()
        else:
            row, edge_perm = torch.sort(dst.to(index_dtype), stable=True)
            edge_perm = edge_perm.to(index_dtype)
            col = src.to(index_dtype)[edge_perm]
        return cls(rowptr=_rowptr(row, num_dst), col=col, row=row, num_src=num_src,
                   num_dst=num_dst, edge_perm=edge_perm, input_values=input_values,
                   degree_bound=degree_bound)

    # ------------------------------------------------------- derived views
    @torch.compiler.disable
    def _build_transpose(self) -> Transpose:
        """One stable sort of the entries by source: natively on CUDA (one
        call: the sort limited to the sources' bits and one gather kernel),
        else torch.sort and gathers; the same result either way."""
        if self.device.type == "cuda" and _native.library() is not None:
            rowptr, col, sources, perm = _native.csr_transpose(self.rowptr, self.col, self.row,
                                                               self.num_src)
        else:
            sources, perm = torch.sort(self.col, stable=True)
            perm = perm.to(self.index_dtype)
            rowptr, col = _rowptr(sources, self.num_src), self.row[perm]
        transpose = Transpose(rowptr=mark_static(rowptr), col=mark_static(col), row=sources,
                              perm=perm)
        # Beside it, as beside the CSR: the kernels learn its degree bound there.
        trust_csr(transpose.rowptr, transpose.col, self.num_dst)
        return transpose

    def reversed(self) -> "Graph":
        """The graph with every edge reversed (PyG's flow="target_to_source"),
        sharing this graph's CSR^T as its CSR (cached)."""
        if self.state.reversed_graph is None:
            t = self.transpose
            perm = t.perm if self.edge_perm is None else self.edge_perm[t.perm]
            self.state.reversed_graph = Graph(
                rowptr=t.rowptr, col=t.col, row=t.row, num_src=self.num_dst,
                num_dst=self.num_src, edge_perm=perm, input_values=self.input_values)
            self.state.reversed_graph.self_loops = self.self_loops
        return self.state.reversed_graph

    def with_remaining_self_loops(self) -> "Graph":
        """PyG's ``add_remaining_self_loops``: every input self loop is
        replaced by exactly one loop per node (cached).

        No sort: each row gets its loop first, then its entries in order.
        Input self loops stay in the structure as DROPPED_LOOP entries of
        weight 0 (removing them would need a host synchronisation for the
        new size). ``state.edge_origin`` of the result maps each entry to the
        input edge whose weight it carries: the edge itself, the node's last
        input self loop (for the added loop, as PyG), NEW_LOOP (fill value)
        or DROPPED_LOOP (0).
        """
        if self.state.self_loop_graph is None:
            self.state.self_loop_graph = self._build_self_loop_graph()
        return self.state.self_loop_graph

    @torch.compiler.disable
    def _build_self_loop_graph(self) -> "Graph":
        if self.is_bipartite:
            raise ValueError(f"Graph: self loops need a square graph, got num_src={self.num_src}"
                             f" and num_dst={self.num_dst}")
        n, num_edges, device = self.num_dst, self.num_edges, self.device
        index_dtype = _self_loop_index_dtype(n, num_edges)
        if device.type == "cuda" and _native.library() is not None \
                and index_dtype == self.index_dtype:  # one native call instead of ~30 launches
            structure = _native.csr_add_self_loops(self.rowptr, self.col, self.row,
                                                   self.edge_perm)
        else:
            structure = self._self_loop_structure(index_dtype)
        return self._self_loop_graph_of(*structure)

    def _self_loop_graph_of(self, rowptr: Tensor, col: Tensor, row: Tensor, origin: Tensor,
                            gcn_values: Optional[Tensor] = None) -> "Graph":
        """The self-loop graph over its structure (pygio_csr_add_self_loops's,
        its GCN values where it wrote them)."""
        n = self.num_dst
        looped = Graph(rowptr=rowptr, col=col, row=row, num_src=n, num_dst=n,
                       degree_bound=None if self.degree_bound is None else self.degree_bound + 1)
        looped.state.edge_origin = origin
        looped.state.gcn_values = gcn_values
        looped.state.dropped_loops = self.self_loops != 0
        return looped

    def _self_loop_structure(self, index_dtype: torch.dtype) -> Tuple[Tensor, ...]:
        """(rowptr, col, row, edge_origin) of the self-loop graph in plain
        torch (the reference of pygio_csr_add_self_loops)."""
        n, num_edges, device = self.num_dst, self.num_edges, self.device
        nodes = torch.arange(n, device=device)
        rowptr = self.rowptr.long() + torch.arange(n + 1, device=device)
        # Entry e of row r moves by r + 1 (the loops of rows 0..r); loop r sits at rowptr[r].
        row = self.row.long()
        entry_pos = torch.arange(num_edges, device=device) + row + 1
        loop_pos = rowptr[:-1]
        col = torch.empty(num_edges + n, dtype=index_dtype, device=device)
        col[entry_pos] = self.col.to(index_dtype)
        col[loop_pos] = nodes.to(index_dtype)
        new_row = torch.empty_like(col)
        new_row[entry_pos] = self.row.to(index_dtype)
        new_row[loop_pos] = nodes.to(index_dtype)

        input_id = (torch.arange(num_edges, device=device) if self.edge_perm is None
                    else self.edge_perm.long())
        is_loop = self.col.long() == row
        last_loop = torch.full((n,), NEW_LOOP, dtype=torch.long, device=device)
        last_loop.scatter_reduce_(0, row, torch.where(is_loop, input_id, NEW_LOOP), "amax")
        origin = torch.empty(num_edges + n, dtype=torch.long, device=device)
        origin[entry_pos] = torch.where(is_loop, DROPPED_LOOP, input_id)
        origin[loop_pos] = last_loop
        return rowptr.to(index_dtype), col, new_row, origin


# ---------------------------------------------------------------- the cache
class _GraphCache:
    """Graphs (and variants: other structures built from a tensor) of
    tensors seen before, keyed by the tensor's identity.

    An entry is valid while the tensor lives and its version counter and the
    requested node counts are unchanged; it is dropped when the tensor dies.
    """

    def __init__(self):
        self._entries: dict[int, dict] = {}

    def lookup(self, adj: Any, num_nodes: NumNodes, build: Callable[[Any, NumNodes], Any],
               variant: str = "") -> Any:
        key = id(adj)
        version = _version_of(adj)
        if isinstance(num_nodes, list):
            num_nodes = tuple(num_nodes)
        per_tensor = self._entries.get(key)
        if per_tensor is not None and per_tensor["ref"]() is adj:
            graph = per_tensor["graphs"].get((version, num_nodes, variant))
            if graph is not None:
                return graph
        graph = build(adj, num_nodes)
        if per_tensor is None or per_tensor["ref"]() is not adj:
            per_tensor = {"ref": weakref.ref(adj, self._forget(key)), "graphs": {}}
            self._entries[key] = per_tensor
        # Keep only the current version's graphs.
        per_tensor["graphs"] = {k: g for k, g in per_tensor["graphs"].items() if k[0] == version}
        per_tensor["graphs"][(version, num_nodes, variant)] = graph
        return graph

    def holds(self, adj: Any) -> bool:
        """Whether any graph of ``adj`` (as it is now) is cached."""
        per_tensor = self._entries.get(id(adj))
        if per_tensor is None or per_tensor["ref"]() is not adj:
            return False
        version = _version_of(adj)
        return any(key[0] == version for key in per_tensor["graphs"])

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


def _cached_graph(adj: Any, num_nodes: NumNodes, build: Callable[[Any, NumNodes], Any],
                  variant: str = "") -> Any:
    """build(adj, num_nodes), cached per (adj, its version, num_nodes,
    variant): a variant names what else than adj's own Graph is built."""
    if torch.compiler.is_compiling():
        return _eager_lookup(adj, num_nodes, build, variant)
    return _GRAPH_CACHE.lookup(adj, num_nodes, build, variant)


def clear_graph_cache() -> None:
    """Drops every cached Graph (and the native state built on it) at once.

    Cached Graphs go by themselves when their ``edge_index`` is freed; this
    frees the memory of those whose tensors are still alive. The next call
    on such a tensor builds its Graph again."""
    _GRAPH_CACHE.clear()


# ------------------------------------------ index statistics in flight
class _StatsInFlight:
    """The index statistics of a new CUDA edge_index on their way to the
    host (:func:`prefetch`): the read started, and which tensor (and
    version) it is of."""
    __slots__ = ("tensor", "version", "pending")

    def __init__(self, edge_index: Tensor):
        self.tensor = weakref.ref(edge_index, _forget_stats_in_flight(id(edge_index)))
        self.version = edge_index._version
        self.pending = _native.start_edge_index_stats(edge_index)

    def read(self) -> _native.EdgeIndexStats:
        """The statistics, as _native.edge_index_stats gives them (waits for
        the copy: the build's one host synchronisation, now without the work
        enqueued after it)."""
        return _native.decode_edge_index_stats(self.pending.read())


# id(edge_index) -> its statistics in flight, taken by the Graph build.
_STATS_IN_FLIGHT: Dict[int, _StatsInFlight] = {}


#: Edges from which :func:`prefetch` starts a new graph's read early. Below
#: it the start's own host cost outweighs the overlap it buys: on an H200,
#: the 2-layer mini-batch steps of 23k and 123k edges (host-bound) ran 1-11%
#: faster without it (medians of 7 rounds, GCNConv and SAGEConv, fp32 and
#: bf16; started from Python), and started from C++ (the host extension)
#: they ran within their noise (+-5%) either way; at 819k edges the GPU
#: works through most of the step and the overlap pays.
PREFETCH_MIN_EDGES = 1 << 19


def prefetch(adj: Any) -> None:
    """Starts the one host read of building a Graph of ``adj`` (a CUDA
    edge_index of at least PREFETCH_MIN_EDGES edges the cache holds no
    graph of): its index statistics are computed and copied to the host
    without waiting. A layer calls this
    before work that needs no graph (its projections), then
    :meth:`Graph.from_input` (or :meth:`Graph.with_pyg_self_loops`): the
    build waits only for the copy, while the GPU runs what was enqueued
    after it, so a new graph no longer leaves the GPU idle while the host
    builds it. Anything else (a cached graph, other inputs, torch.compile,
    CUDA-graph capture) is left to :meth:`Graph.from_input` as it is."""
    if (type(adj) is not Tensor or not adj.is_cuda or adj.dim() != 2 or adj.size(0) != 2
            or adj.size(1) < max(PREFETCH_MIN_EDGES, 1)
            or adj.dtype not in (torch.int32, torch.int64)
            or torch.compiler.is_compiling() or _native.library() is None
            or _GRAPH_CACHE.holds(adj)
            or torch.cuda.is_current_stream_capturing()):
        return
    _STATS_IN_FLIGHT[id(adj)] = _StatsInFlight(adj)


def _take_stats_in_flight(edge_index: Tensor) -> Optional[_StatsInFlight]:
    """The statistics :func:`prefetch` started for this very tensor, unless
    it changed since (then None)."""
    in_flight = _STATS_IN_FLIGHT.pop(id(edge_index), None)
    if (in_flight is None or in_flight.tensor() is not edge_index
            or in_flight.version != edge_index._version):
        return None
    return in_flight


def _forget_stats_in_flight(key: int) -> Callable[[weakref.ref], None]:
    def callback(ref: weakref.ref) -> None:
        in_flight = _STATS_IN_FLIGHT.get(key)
        if in_flight is not None and in_flight.tensor is ref:
            del _STATS_IN_FLIGHT[key]
    return callback


# ------------------------------------------- CSR structures known valid
class _ValidCsr:
    """A CSR structure known valid (rowptr from 0 to nnz, non-decreasing):
    every col entry is below ``col_bound``, while neither tensor changes."""
    __slots__ = ("col", "versions", "col_bound")

    def __init__(self, rowptr: Tensor, col: Tensor, col_bound: int):
        self.col = weakref.ref(col)
        self.versions = (rowptr._version, col._version)
        self.col_bound = col_bound


def trust_csr(rowptr: Tensor, col: Tensor, col_bound: int) -> "StructureState":
    """Records that (rowptr, col) is a valid CSR structure with every col
    entry below ``col_bound`` (Graphs record theirs; ops.checks records what
    it has read), so raw ops need not read it again; kept in the state
    beside the structure, which is returned."""
    state = structure_state(rowptr)
    state.valid_csr = _ValidCsr(rowptr, col, col_bound)
    return state


def known_valid_csr(rowptr: Tensor, col: Tensor, num_cols: int) -> bool:
    """True if (rowptr, col) was recorded valid with col entries below
    ``num_cols`` and neither tensor changed since."""
    state = known_structure_state(rowptr)
    known = None if state is None else state.valid_csr
    return (known is not None and known.col() is col and known.col_bound <= num_cols
            and known.versions == (rowptr._version, col._version))


# ----------------------------------------- kernel state beside a structure
class StructureState:
    """What the ops keep beside one CSR structure: whether it is known valid
    (``valid_csr``: :func:`trust_csr`), the SpMM backends' plans (objects
    with an ``nbytes``; ops.spmm_backends), the hub degree per quantile
    (int64 device scalars; ops.hubs) and the Graph's degree bound where it
    knows one (no row has more entries; None: not known), or a read of it
    on its way (:meth:`request_degree_bound`). Lives as long as the
    structure's rowptr tensor."""
    __slots__ = ("valid_csr", "plans", "hub_degrees", "degree_bound", "pending_degree_bound",
                 "__weakref__")

    def __init__(self):
        self.valid_csr: Optional[_ValidCsr] = None
        self.plans: Dict[tuple, Any] = {}
        self.hub_degrees: Dict[float, Tensor] = {}
        self.degree_bound: Optional[int] = None
        # (pinned host scalar, CUDA event after the copy into it)
        self.pending_degree_bound: Optional[Tuple[Tensor, Any]] = None

    def known_degree_bound(self) -> Optional[int]:
        """``degree_bound``, taking up a requested read that has arrived;
        never waits for the device."""
        pending = self.pending_degree_bound
        if (self.degree_bound is None and pending is not None
                and not torch.cuda.is_current_stream_capturing() and pending[1].query()):
            self.degree_bound = int(pending[0])
            self.pending_degree_bound = None
        return self.degree_bound

    def request_degree_bound(self, rowptr: Tensor) -> None:
        """Starts reading max_i (rowptr[i+1] - rowptr[i]) of a CUDA
        structure back to the host without waiting: a reduction and a copy
        to pinned memory on the current stream, then an event that
        :meth:`known_degree_bound` checks. A graph whose edges did not come
        grouped by destination learns its bound this way after its first
        SpMM, so the later ones skip the hub launches where no row is long
        (a reused graph: every call after the first; a new one: its next
        layer, once the GPU got there). Nothing during CUDA-graph capture."""
        if (self.degree_bound is not None or self.pending_degree_bound is not None
                or rowptr.numel() < 2 or torch.cuda.is_current_stream_capturing()):
            return
        host = torch.empty((), dtype=rowptr.dtype, pin_memory=True)
        host.copy_(rowptr.diff().max(), non_blocking=True)
        ready = torch.cuda.Event()
        ready.record(torch.cuda.current_stream(rowptr.device))
        self.pending_degree_bound = (host, ready)


# id(rowptr) -> (weak reference to rowptr, its state). A plain dict keyed by
# identity: a lookup is on every SpMM call, and WeakIdKeyDictionary's costs
# several microseconds. The entry goes when the tensor dies.
_STRUCTURES: Dict[int, Tuple[weakref.ref, StructureState]] = {}


def structure_state(rowptr: Tensor) -> StructureState:
    """The state kept beside the structure whose rowptr this is (keyed by
    the tensor object, held weakly; not by its address)."""
    key = id(rowptr)
    entry = _STRUCTURES.get(key)
    if entry is not None and entry[0]() is rowptr:
        return entry[1]
    state = StructureState()
    _STRUCTURES[key] = (weakref.ref(rowptr, _forget_structure(key)), state)
    return state


def known_structure_state(rowptr: Tensor) -> Optional[StructureState]:
    """The state beside rowptr's structure, or None where there is none."""
    entry = _STRUCTURES.get(id(rowptr))
    return entry[1] if entry is not None and entry[0]() is rowptr else None


def _forget_structure(key: int) -> Callable[[weakref.ref], None]:
    def callback(ref: weakref.ref) -> None:
        entry = _STRUCTURES.get(key)
        if entry is not None and entry[0] is ref:
            del _STRUCTURES[key]
    return callback


# ------------------------------------------------------------------ helpers
def mark_static(tensor: Tensor) -> Tensor:
    """Tells torch.compile the tensor keeps its address: CUDA-graph trees then
    use it in place instead of copying it into their pool each replay. Not
    guarded, so a new Graph does not recompile."""
    torch._dynamo.mark_static_address(tensor, guard=False)
    return tensor


def _index_dtype(num_src: int, num_dst: int, num_edges: int) -> torch.dtype:
    if config.force_int64_indices:
        return torch.int64
    return torch.int32 if max(num_src, num_dst, num_edges) <= INT32_LIMIT else torch.int64


def _self_loop_index_dtype(num_nodes: int, num_edges: int) -> torch.dtype:
    """The index dtype of a square graph's self-loop graph: its
    ``num_edges`` entries and one loop a node."""
    return _index_dtype(num_nodes, num_nodes, num_edges + num_nodes)


def _index_views(edge_index: Tensor, index_dtype: torch.dtype) -> bool:
    """Whether a grouped edge_index's rows serve as the Graph's col and row
    as they are (views: the index dtype already, contiguous rows)."""
    return edge_index.dtype == index_dtype and edge_index.stride(1) == 1


def _native_build(edge_index: Tensor) -> bool:
    """True where the native library builds this edge_index's Graph (CUDA)."""
    return edge_index.is_cuda and _native.library() is not None


def _index_stats(edge_index: Tensor) -> _native.EdgeIndexStats:
    """What one pass over a non-empty edge_index finds (index range, whether
    the destinations are non-decreasing, the longest run of one destination,
    the self loops), read back in one host synchronisation: one native pass
    on CUDA (its statistics already in flight where :func:`prefetch`
    started them), torch ops on the CPU."""
    if _native_build(edge_index):
        in_flight = _take_stats_in_flight(edge_index)
        return _native.edge_index_stats(edge_index) if in_flight is None else in_flight.read()
    src, dst = edge_index
    low, high = torch.aminmax(edge_index, dim=1)
    ordered = (dst[1:] >= dst[:-1]).all()
    longest_run = torch.unique_consecutive(dst, return_counts=True)[1].max()
    self_loops = (src == dst).sum()
    values = torch.cat([low.long(), high.long(),
                        torch.stack([ordered.long(), longest_run.long(), self_loops.long()])])
    min_src, min_dst, max_src, max_dst, ordered, longest_run, self_loops = values.tolist()
    return _native.EdgeIndexStats(min_src, min_dst, max_src, max_dst, ordered != 0, longest_run,
                                  self_loops)


def _rowptr(sorted_index: Tensor, num_rows: int) -> Tensor:
    """CSR row pointer of a non-decreasing index, by binary search (no host
    synchronisation; torch._convert_indices_from_coo_to_csr took 2.4 ms for
    820k entries on an H200, this takes microseconds)."""
    rows = torch.arange(num_rows + 1, dtype=sorted_index.dtype, device=sorted_index.device)
    return torch.searchsorted(sorted_index, rows, out_int32=sorted_index.dtype == torch.int32)


def entry_rows(rowptr: Tensor, num_entries: int) -> Tensor:
    """The row of every CSR entry (int64): row r repeated rowptr[r + 1] -
    rowptr[r] times (``num_entries`` = rowptr[-1], given so that no host
    read is needed)."""
    rows = torch.arange(rowptr.numel() - 1, device=rowptr.device)
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


def _node_count(value: Any) -> int:
    """A node count as an int: an int, a NumPy integer or a 0-d integer
    tensor; a TypeError for anything else (a float is not truncated)."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"Graph: node counts must be integers, got {value!r}") from None


def _check_edge_index(edge_index: Tensor) -> None:
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"Graph: edge_index must be a tensor, got {type(edge_index).__name__}")
    if edge_index.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"Graph: edge_index must be an integer tensor (int32 or int64), "
                        f"got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"Graph: edge_index must have shape [2, num_edges], "
                         f"got {list(edge_index.shape)}")


def _check_index_range(stats: _native.EdgeIndexStats, num_src: int, num_dst: int) -> None:
    """ValueError unless the sources / destinations of ``stats`` lie in
    [0, num_src) / [0, num_dst)."""
    rows = (("source (edge_index[0])", stats.min_src, stats.max_src, num_src),
            ("destination (edge_index[1])", stats.min_dst, stats.max_dst, num_dst))
    for what, low, high, size in rows:
        if low < 0:
            raise ValueError(f"Graph: {what} index {low} is negative")
        if high >= size:
            raise ValueError(f"Graph: {what} index {high} is out of range for {size} nodes")


def _pyg_self_looped(adj: Tensor, num_nodes: Tuple[int, int]) -> Tuple[Graph, Tensor, Tensor]:
    """Graph.with_pyg_self_loops's build: one read of the index statistics
    (range and self loops), then one native call where the edges come
    grouped by destination (CUDA), else a stable partition of the kept edges
    (a scatter to their running count, the loops after them; a boolean
    index or nonzero would read their number back a second time) and a
    sort."""
    edge_index = _plain_tensor(adj)
    _check_edge_index(edge_index)
    num_src, num_dst = _resolve_num_nodes(num_nodes, 0)
    num_edges, num_loops = edge_index.size(1), min(num_src, num_dst)
    stats = None
    if num_edges > 0:
        stats = _index_stats(edge_index)  # the one host synchronisation
        _check_index_range(stats, num_src, num_dst)
    num_kept = num_edges - (0 if stats is None else stats.self_loops)
    # Rows keep at most their input entries (less their loops), plus one loop.
    degree_bound = stats.longest_run + 1 if stats is not None and stats.grouped else None
    if degree_bound is not None and _native_build(edge_index):
        index_dtype = _index_dtype(num_src, num_dst, num_kept + num_loops)
        looped, kept, rowptr, col, row, perm = _native.csr_pyg_self_loops(
            edge_index, num_dst, num_loops, num_kept, index_dtype)
        graph = Graph(rowptr=rowptr, col=col, row=row, num_src=num_src, num_dst=num_dst,
                      edge_perm=perm, degree_bound=degree_bound)
        return graph, looped, kept
    device = edge_index.device
    keep = edge_index[0] != edge_index[1]
    # Kept edge e goes to slot (kept edges before it), a loop to num_kept + (loops before it).
    slot = torch.where(keep, torch.cumsum(keep, 0) - 1, num_kept + torch.cumsum(~keep, 0) - 1)
    order = torch.empty(num_edges, dtype=torch.long, device=device)
    kept = order.scatter_(0, slot, torch.arange(num_edges, device=device))[:num_kept]
    loops = torch.arange(num_loops, device=device, dtype=edge_index.dtype)
    looped = torch.cat([edge_index.index_select(1, kept), torch.stack([loops, loops])], dim=1)
    graph = Graph._build(looped, num_src, num_dst, None, grouped=False, degree_bound=degree_bound)
    return graph, looped, kept


def _resolve_num_nodes(num_nodes: NumNodes, inferred: int) -> Tuple[int, int]:
    if num_nodes is None:
        return inferred, inferred
    if isinstance(num_nodes, (tuple, list)):
        if len(num_nodes) != 2:
            raise ValueError(f"Graph: num_nodes must be an int or (num_src, num_dst), "
                             f"got {num_nodes}")
        num_src, num_dst = (_node_count(v) for v in num_nodes)
    else:
        num_src = num_dst = _node_count(num_nodes)
    if min(num_src, num_dst) < 0:
        raise ValueError(f"Graph: node counts must be non-negative, got ({num_src}, {num_dst})")
    return num_src, num_dst


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
