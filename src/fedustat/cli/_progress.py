"""A progress bar on stderr that never mixes with the output on stdout."""

from __future__ import annotations

import sys
from typing import Any


class _Progress:
    """A progress bar over experiments on stderr, its elapsed time ticking while one runs.

    The experiments report no intermediate steps, so the bar counts finished experiments
    and a background thread refreshes it once a second (the elapsed time stays current
    during a long one). Disabled, it prints the text it is given and nothing else.
    """

    def __init__(self, total: int, show: bool, unit: str = "experiment") -> None:
        self.show = show
        self.bar: Any = None
        self._stop: Any = None
        self._thread: Any = None
        if show:
            import threading

            from tqdm import tqdm

            self.bar = tqdm(total=total, file=sys.stderr, unit=unit,
                            dynamic_ncols=True)
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self.bar.refresh()

    def __enter__(self) -> _Progress:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self._stop.set()
            self._thread.join()
            self.bar.close()

    def describe(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_description(name)

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def write_above(self, text: str) -> None:
        """Print to stdout without breaking the bar on stderr."""
        if self.bar is not None:
            self.bar.clear()
        print(text, flush=True)
        if self.bar is not None:
            self.bar.refresh()

