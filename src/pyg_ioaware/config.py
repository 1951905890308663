"""Package-wide settings.

``spmm_backward``: how SpMM's backward computes dX = A^T dY.
    ``"auto"`` (default): a graph's first backward pass runs a transposed
    SpMM over A's CSR (ours, or cuSPARSE's on large graphs) where it is
    small, so a small graph used for one training step (a mini-batch) never
    pays for a CSR^T; a transposed SpMM of at least
    ``ops.spmm.LazyTranspose.MATERIALIZE_WORK`` entries x width, or a later
    backward pass over the same Graph (the graph is reused), builds the
    CSR^T once and runs a plain SpMM over it from then on. With
    torch.use_deterministic_algorithms(True) it behaves as "materialized".
    Traced by torch.compile, it uses the CSR^T where the Graph already has
    one (an eager step built it, or ``graph.transpose`` was read), else the
    transposed SpMM.
    ``"materialized"``: always a plain SpMM over the Graph's CSR^T, built on
    first need (one sort) and cached (deterministic).
    ``"transpose"``: always the transposed SpMM over A's CSR (no
    second structure, about 2x slower at D=512, and may give run-to-run
    differences in the last bits).
    Set from the environment variable PYG_IOAWARE_SPMM_BACKWARD too.

``native_host``: run the SpMM family's autograd and a new graph's native
    launches in C++ (the optional extension module of cuda/host, see
    pyg_ioaware._native_host) wherever it is built for the running torch;
    off: the Python autograd.Function and ctypes everywhere (the same
    results, bitwise; more host time a call). On by default;
    PYG_IOAWARE_NATIVE_HOST=0 turns it off.

``force_int64_indices``: build every Graph with int64 indices, the path
    graphs past int32's range take (for tests of that path). Off by
    default; PYG_IOAWARE_FORCE_INT64_INDICES=1 turns it on.

``minmax_backward``: how the min / max backward adds each output's
    gradient to its winning source.
    ``"auto"`` (default): ``"buckets"`` where ops.minmax.backward_path
    finds them faster (float32, at least 4 entries a destination on
    average, and a source gradient of at least 32 L2 caches: 2 GB on an
    H200), else ``"atomics"``.
    ``"atomics"``: one atomicAdd a plain winner, straight into the
    gradient (no extra memory).
    ``"buckets"``: the plain winners written grouped by entry, then summed
    per source over the graph's CSR^T (built on first need) and added to
    each source's row once: no scattered read-modify-write an element, for
    a workspace of 6 (float32) or 4 (16-bit) bytes an output element, 4 an
    edge and 8 a node. CUDA float32 / 16-bit features of at most 512 columns;
    elsewhere the other paths run.
    Under torch.use_deterministic_algorithms(True) every source's gradient
    is gathered over the CSR^T in a fixed order instead, whatever the mode.
    Set from the environment variable PYG_IOAWARE_MINMAX_BACKWARD too.

``autotune``: time every supported backend the first time a shape class is
    met and keep the fastest (persisted; see ops.tuning). Off by default: the
    heuristic choice costs nothing. Also on with PYG_IOAWARE_AUTOTUNE=1.
"""
import os

SPMM_BACKWARD_MODES = ("auto", "materialized", "transpose")

spmm_backward = os.environ.get("PYG_IOAWARE_SPMM_BACKWARD", "auto")
if spmm_backward not in SPMM_BACKWARD_MODES:
    raise ValueError(f"PYG_IOAWARE_SPMM_BACKWARD={spmm_backward!r}: expected one of "
                     f"{SPMM_BACKWARD_MODES}")

MINMAX_BACKWARD_MODES = ("auto", "atomics", "buckets")

minmax_backward = os.environ.get("PYG_IOAWARE_MINMAX_BACKWARD", "auto")
if minmax_backward not in MINMAX_BACKWARD_MODES:
    raise ValueError(f"PYG_IOAWARE_MINMAX_BACKWARD={minmax_backward!r}: expected one of "
                     f"{MINMAX_BACKWARD_MODES}")

autotune = False

native_host = os.environ.get("PYG_IOAWARE_NATIVE_HOST", "1") != "0"

force_int64_indices = os.environ.get("PYG_IOAWARE_FORCE_INT64_INDICES") == "1"
