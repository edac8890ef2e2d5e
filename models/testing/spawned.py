"""One spawned worker process per test process, for the checks that a step pickles into a data-loader worker.

A data loader with ``multiprocessing_context="spawn"`` (the default on macOS and where CUDA is initialised)
pickles the collate and position-id functions into fresh interpreters. The suites prove that with a real
spawned process; starting one per check costs an interpreter start plus torch and transformers imports
(seconds, dozens of times per run), so the process is started once and reused. Every call still crosses
the process boundary as pickled bytes, so what is proven is unchanged.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from typing import Any


@cache
def _worker() -> ProcessPoolExecutor:
    """The spawned process, started on first use; concurrent.futures joins it when the interpreter exits."""
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def run_in_spawned_worker(function: Callable[[bytes], Any], payload: bytes) -> Any:
    """``function(payload)`` in a spawned interpreter: ``function`` must be importable by name, as in a loader."""
    return _worker().submit(function, payload).result()
