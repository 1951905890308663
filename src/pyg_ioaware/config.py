"""Package-wide settings.

``spmm_backward``: how SpMM's backward computes dX = A^T dY.
    ``"materialized"`` (default): a plain SpMM over the CSR^T the Graph
    already holds (deterministic, cached plan of its own).
    ``"transpose"``: cuSPARSE's transposed SpMM over A's CSR (no second
    structure needed, but may give run-to-run differences in the last bits).
    Set from the environment variable PYG_IOAWARE_SPMM_BACKWARD too.
"""
import os

SPMM_BACKWARD_MODES = ("materialized", "transpose")

spmm_backward = os.environ.get("PYG_IOAWARE_SPMM_BACKWARD", "materialized")
if spmm_backward not in SPMM_BACKWARD_MODES:
    raise ValueError(f"PYG_IOAWARE_SPMM_BACKWARD={spmm_backward!r}: expected one of "
                     f"{SPMM_BACKWARD_MODES}")
