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

autotune = False

native_host = os.environ.get("PYG_IOAWARE_NATIVE_HOST", "1") != "0"

force_int64_indices = os.environ.get("PYG_IOAWARE_FORCE_INT64_INDICES") == "1"
