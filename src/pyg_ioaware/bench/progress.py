"""Progress of a benchmark run: a tqdm bar on a terminal, else one flushed
line per step (log files)."""
from __future__ import annotations

import sys


class Progress:
    """Counts measurement steps: :meth:`start` one, :meth:`finish` it with a
    line saying what it measured; :meth:`note` prints anything else."""

    def __init__(self, total: int):
        self.total, self.done, self.label = total, 0, ""
        self.bar = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="step", dynamic_ncols=True)
            except ImportError:
                pass

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def start(self, label: str) -> None:
        self.done += 1
        self.label = label
        if self.bar is not None:
            self.bar.set_description(label)
        else:
            print(f"[{self.done}/{self.total}] {label} ...", flush=True)

    def finish(self, text: str) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.write(f"{self.label}: {text}")
        else:
            print(f"    {text}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
