"""Timing and peak memory of one forward + backward step.

On CUDA: CUDA events around the forward and around the backward, read after
one synchronize; peak memory above the pre-call baseline from the caching
allocator's statistics. On CPU: time.perf_counter and no memory figures, so
the CLI runs (and is tested) where no GPU is.
"""
from __future__ import annotations

import contextlib
import gc
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Tuple, TypeVar

import torch
from torch import Tensor

MB = 2.0**20
T = TypeVar("T")

# Name of a precision setting -> autocast dtype (None: plain fp32). Features
# are created in the autocast dtype: a layer in the middle of a mixed-precision
# network receives them that way.
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def feature_dtype(precision: str) -> torch.dtype:
    """dtype of the input features under a precision setting."""
    return PRECISIONS[precision] or torch.float32


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast context of a precision setting (a no-op for fp32)."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@dataclass
class Measurement:
    """Result of timing one implementation: ``status`` is "ok", "OOM",
    "unsupported" or "error"; times in ms, memory in MB (None: not measured)."""
    status: str
    fwd_ms: Optional[float] = None
    bwd_ms: Optional[float] = None
    peak_fwd_mb: Optional[float] = None
    peak_fwd_bwd_mb: Optional[float] = None
    detail: Optional[str] = None


class Clock:
    """CUDA events on a GPU, perf_counter on CPU; read with :meth:`elapsed_ms`
    after :meth:`synchronize`."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def elapsed_ms(self, start, end) -> float:
        if self.cuda:
            return start.elapsed_time(end)
        return (end - start) * 1e3


def oom_message(error: BaseException) -> str:
    """The first sentences of an out-of-memory error (what it tried to allocate)."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    cut = text.find(" GPU ")
    return text[:cut] if cut > 0 else text


def free_memory(device: torch.device) -> None:
    """Collect garbage and hand cached blocks back to the device."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def measure(step: Callable[[Tensor], Tensor], x: Tensor, params: Iterable[Tensor],
            precision: str, iters: int, warmup: int) -> Measurement:
    """Median forward / backward ms and peak memory of ``step(x)``.

    Each iteration runs the forward under the precision's autocast, then a
    backward from a fresh random output gradient; gradients of ``x`` and
    ``params`` are cleared before each iteration so nothing accumulates.
    Warm-up iterations (first-call work such as building a graph cache) count
    for neither time nor memory. A CUDA out-of-memory error gives status "OOM"
    and frees what it can.
    """
    device = x.device
    leaves: List[Tensor] = [x, *params]
    clock = Clock(device)
    cuda = device.type == "cuda"
    marks = []
    peak_fwd = peak_all = 0
    oom = None
    out = grad = None
    try:
        for i in range(warmup + iters):
            for leaf in leaves:
                leaf.grad = None
            if cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
            t0 = clock.mark()
            with autocast(precision, device):
                out = step(x)
            t1 = clock.mark()
            timed = i >= warmup
            if cuda and timed:
                peak_fwd = max(peak_fwd, torch.cuda.max_memory_allocated(device) - base)
            grad = torch.randn_like(out)
            t2 = clock.mark()
            out.backward(grad)
            t3 = clock.mark()
            if cuda and timed:
                peak_all = max(peak_all, torch.cuda.max_memory_allocated(device) - base)
            out = grad = None
            if timed:
                marks.append((t0, t1, t2, t3))
        clock.synchronize()
    except torch.cuda.OutOfMemoryError as error:
        oom = oom_message(error)
    if oom is not None:
        out = grad = None
        for leaf in leaves:
            leaf.grad = None
        free_memory(device)
        return Measurement("OOM", detail=oom)
    for leaf in leaves:
        leaf.grad = None
    fwd = statistics.median(clock.elapsed_ms(t0, t1) for t0, t1, _, _ in marks)
    bwd = statistics.median(clock.elapsed_ms(t2, t3) for _, _, t2, t3 in marks)
    return Measurement("ok", fwd, bwd, peak_fwd / MB if cuda else None,
                       peak_all / MB if cuda else None)


def time_once(fn: Callable[[], T], device: torch.device) -> Tuple[float, T]:
    """One call of ``fn``, the device synchronized around it: (ms, result)."""
    clock = Clock(device)
    clock.synchronize()
    start = clock.mark()
    result = fn()
    end = clock.mark()
    clock.synchronize()
    return clock.elapsed_ms(start, end), result
