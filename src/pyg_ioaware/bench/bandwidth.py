"""Effective bandwidth of the aggregation kernels alone (docs/benchmark_protocol.md).

Each family brings its kernels and their bytes model (for SpMM, the minimal
model of cases.spmm: gathered neighbour rows once per edge, output rows
once), so index and edge-value traffic counts as the kernel's overhead, not
as useful bytes. GB/s = useful bytes / time; the share is taken of the
device's measured device-to-device copy bandwidth (bytes read plus bytes
written). A kernel is timed back to back (``CALLS`` calls between two clock
marks, the median of ``REPEATS`` such runs), so launch gaps hide behind
execution; a CPU has no launch gaps to hide, and fewer calls keep the
CPU-sized suite short. A slow kernel gets fewer calls per run, about
``CALL_BUDGET_MS`` of work (at least one): a launch gap is nothing beside
a call of tens of ms, and a 1-second kernel (GATv2 (8, 128) on
products-like) would otherwise take minutes.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence

import torch

from .timing import Clock, oom_message

CALLS, REPEATS = 20, 5
CALLS_CPU, REPEATS_CPU = 2, 3
# Back-to-back calls per run are capped to about this much work (see above).
CALL_BUDGET_MS = 500.0
COPY_BYTES = 1 << 30  # large enough to stream from HBM, not L2
COPY_BYTES_CPU = 1 << 26


@dataclass
class Kernel:
    """One aggregation kernel on prepared inputs: ``run()`` launches it;
    ``min_bytes``: its useful bytes under its family's model; ``info``:
    anything more its family reports with it (added to its result row)."""
    name: str
    run: Callable[[], object]
    min_bytes: int
    info: Dict[str, object] = field(default_factory=dict)


def time_back_to_back(fn: Callable[[], object], device: torch.device) -> float:
    """Median over REPEATS of the mean ms of CALLS back-to-back calls
    (CALLS_CPU and REPEATS_CPU on a CPU; fewer calls where the warm-up call
    took more than CALL_BUDGET_MS / CALLS)."""
    calls, repeats = (CALLS, REPEATS) if device.type == "cuda" else (CALLS_CPU, REPEATS_CPU)
    clock = Clock(device)
    clock.synchronize()
    start = clock.mark()
    fn()  # warm-up (plans, caches)
    end = clock.mark()
    clock.synchronize()
    warm_ms = clock.elapsed_ms(start, end)
    if warm_ms > 0:
        calls = max(1, min(calls, int(CALL_BUDGET_MS / warm_ms)))
    runs = []
    for _ in range(repeats):
        start = clock.mark()
        for _ in range(calls):
            fn()
        end = clock.mark()
        clock.synchronize()
        runs.append(clock.elapsed_ms(start, end) / calls)
    return statistics.median(runs)


def copy_bandwidth_gbs(device: torch.device) -> float:
    """Device-to-device copy rate, counting bytes read plus bytes written."""
    nbytes = COPY_BYTES if device.type == "cuda" else COPY_BYTES_CPU
    src = torch.rand(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    ms = time_back_to_back(lambda: dst.copy_(src), device)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def measure_kernels(kernels: Sequence[Kernel], device: torch.device,
                    copy_gbs: float) -> List[Dict[str, object]]:
    """One row per kernel: ms, GB/s of useful bytes, share of copy."""
    rows = []
    for kernel in kernels:
        row: Dict[str, object] = {"kernel": kernel.name, "min_bytes": kernel.min_bytes,
                                  **kernel.info}
        try:
            ms = time_back_to_back(kernel.run, device)
            gbs = kernel.min_bytes / (ms * 1e-3) / 1e9
            row.update(status="ok", ms=ms, gbs=gbs, share_of_copy=gbs / copy_gbs)
        except torch.cuda.OutOfMemoryError as error:
            row.update(status="OOM", detail=oom_message(error))
        except (RuntimeError, NotImplementedError) as error:  # e.g. a dtype torch.sparse lacks
            row.update(status="unsupported", detail=str(error).splitlines()[0])
        rows.append(row)
    return rows
