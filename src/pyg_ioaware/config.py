"""Package-wide settings.

``spmm_backward``: how SpMM's backward computes dX = A^T dY.
    ``"materialized"`` (default): a plain SpMM over the Graph's CSR^T, built
    on first need (one sort) and cached (deterministic).
    ``"transpose"``: cuSPARSE's transposed SpMM over A's CSR (no second
    structure, about 2x slower at D=512, and may give run-to-run differences
    in the last bits).
    Set from the environment variable PYG_IOAWARE_SPMM_BACKWARD too.

``autotune``: time every supported backend the first time a shape class is
    met and keep the fastest (persisted; see ops.tuning). Off by default: the
    heuristic choice costs nothing. Also on with PYG_IOAWARE_AUTOTUNE=1.
"""
import os

SPMM_BACKWARD_MODES = ("materialized", "transpose")

spmm_backward = os.environ.get("PYG_IOAWARE_SPMM_BACKWARD", "materialized")
if spmm_backward not in SPMM_BACKWARD_MODES:
    raise ValueError(f"PYG_IOAWARE_SPMM_BACKWARD={spmm_backward!r}: expected one of "
                     f"{SPMM_BACKWARD_MODES}")

autotune = False
