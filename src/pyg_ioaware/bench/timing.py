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
from typing import Callable, Dict, Iterable, List, Optional, Tuple, TypeVar

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


class LayerTimer:
    """Forward / backward timing and peak memory of ``step(x)``, run in
    pieces (:meth:`run`), read with :meth:`result`.

    Each iteration runs the forward under the precision's autocast, then a
    backward from a fresh random output gradient; gradients of ``x`` and
    ``params`` are cleared before each iteration so nothing accumulates.
    Only recorded iterations count for time and memory (warm-up ones cover
    first-call work such as building a graph cache). Peak memory is the
    allocator's peak above the iteration's starting allocation.
    """

    def __init__(self, step: Callable[[Tensor], Tensor], x: Tensor, params: Iterable[Tensor],
                 precision: str):
        self.step, self.x, self.precision = step, x, precision
        self.leaves: List[Tensor] = [x, *params]
        self.clock = Clock(x.device)
        self.marks: List[tuple] = []
        self.peak_fwd = self.peak_all = 0

    def run(self, iters: int, record: bool = True) -> None:
        """``iters`` iterations (raises torch.cuda.OutOfMemoryError)."""
        device, clock = self.x.device, self.clock
        cuda = device.type == "cuda"
        for _ in range(iters):
            self.clear_grads()
            if cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
            t0 = clock.mark()
            with autocast(self.precision, device):
                out = self.step(self.x)
            t1 = clock.mark()
            if cuda and record:
                self.peak_fwd = max(self.peak_fwd,
                                    torch.cuda.max_memory_allocated(device) - base)
            grad = torch.randn_like(out)
            t2 = clock.mark()
            out.backward(grad)
            t3 = clock.mark()
            if cuda and record:
                self.peak_all = max(self.peak_all,
                                    torch.cuda.max_memory_allocated(device) - base)
            out = grad = None
            if record:
                self.marks.append((t0, t1, t2, t3))

    def clear_grads(self) -> None:
        for leaf in self.leaves:
            leaf.grad = None

    def result(self) -> Measurement:
        """Median forward and backward ms of the recorded iterations, peaks in MB."""
        self.clock.synchronize()
        self.clear_grads()
        elapsed = self.clock.elapsed_ms
        fwd = statistics.median(elapsed(t0, t1) for t0, t1, _, _ in self.marks)
        bwd = statistics.median(elapsed(t2, t3) for _, _, t2, t3 in self.marks)
        cuda = self.x.device.type == "cuda"
        return Measurement("ok", fwd, bwd, self.peak_fwd / MB if cuda else None,
                           self.peak_all / MB if cuda else None)


def take_turns(runs: Dict[str, Callable[[int, bool], None]], iters: int, warmup: int,
               rounds: int, failed: Callable[[str, Exception], None]) -> None:
    """Calls ``runs[name](count, record)``: ``warmup`` unrecorded iterations
    each, then ``iters`` recorded ones (rounded up to whole rounds) in
    ``rounds`` rounds (at most ``iters``), each round giving every run its
    share in turn, so that a drift of the host's speed during the timing
    (small problems are bound by host time) weighs on every run alike. A
    run that raises is handed to ``failed(name, error)`` (inside the
    ``except`` clause) and dropped."""
    dropped = set()
    rounds = max(1, min(rounds, iters))
    per_round = -(-iters // rounds)
    for count, record in [(warmup, False)] + [(per_round, True)] * rounds:
        for name, run in runs.items():
            if name in dropped or count == 0:
                continue
            try:
                run(count, record)
            except Exception as error:  # the caller reports it as a status
                dropped.add(name)
                failed(name, error)


def measure_interleaved(timers: Dict[str, LayerTimer], iters: int, warmup: int, rounds: int,
                        failed: Callable[[str, Exception], Measurement]) -> Dict[str, Measurement]:
    """:class:`LayerTimer` results of implementations timed in turns
    (:func:`take_turns`); one that raises gets ``failed(name, error)``."""
    results: Dict[str, Measurement] = {}

    def drop(name: str, error: Exception) -> None:
        timers[name].clear_grads()
        results[name] = failed(name, error)

    take_turns({name: timer.run for name, timer in timers.items()}, iters, warmup, rounds, drop)
    return {name: results[name] if name in results else timer.result()
            for name, timer in timers.items()}


def out_of_memory(error: Exception) -> Measurement:
    """Status "OOM" for a CUDA out-of-memory error; any other is raised again."""
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return Measurement("OOM", detail=oom_message(error))
    raise error


def measure(step: Callable[[Tensor], Tensor], x: Tensor, params: Iterable[Tensor],
            precision: str, iters: int, warmup: int) -> Measurement:
    """Median forward / backward ms and peak memory of ``step(x)`` alone
    (:class:`LayerTimer`, ``warmup`` iterations first). A CUDA out-of-memory
    error gives status "OOM" and frees what it can."""
    timer = LayerTimer(step, x, params, precision)
    result = measure_interleaved({"step": timer}, iters, warmup, 1,
                                 lambda _, error: out_of_memory(error))["step"]
    if result.status == "OOM":
        free_memory(x.device)
    return result


def time_once(fn: Callable[[], T], device: torch.device) -> Tuple[float, T]:
    """One call of ``fn``, the device synchronized around it: (ms, result)."""
    clock = Clock(device)
    clock.synchronize()
    start = clock.mark()
    result = fn()
    end = clock.mark()
    clock.synchronize()
    return clock.elapsed_ms(start, end), result
