"""Section ``ldp_tree`` of ``bench_inference.py``."""

from __future__ import annotations

from inference_common import Row


def rows(quick: bool, seed: int) -> list[Row]:
    """The measured figures of this section beside their goals."""
    return []
