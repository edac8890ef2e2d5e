"""Preparing configs in worker processes: one batch of configs per worker, each with its own context.

Forked workers inherit the imported config modules, so a config crosses as its module and variable
name (``LoadedConfig.__reduce__``) and the context as its settings (``RunContext.__getstate__``);
a worker's context caches what its batch parses, and only the prepared results come back.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from modelgraft.generator.context import RunContext
from modelgraft.generator.discovery import LoadedConfig

_Result = TypeVar("_Result")


def default_jobs(count: int) -> int:
    """One worker per usable core, never more than there are configs."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(count, cores))


def map_configs(
    work: Callable[[LoadedConfig, RunContext], _Result], configs: list[LoadedConfig], context: RunContext
) -> list[_Result]:
    """``work(config, context)`` for every config, in order; in forked workers when that helps."""
    jobs = context.jobs if context.jobs is not None else default_jobs(len(configs))
    if jobs <= 1 or len(configs) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [work(c, context) for c in configs]
    jobs = min(jobs, len(configs))
    batches = [configs[i::jobs] for i in range(jobs)]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        done = list(pool.map(_run_batch, [work] * jobs, batches, [context] * jobs))
    results: list[_Result] = [None] * len(configs)  # type: ignore[list-item]
    for start, batch_results in enumerate(done):
        results[start::jobs] = batch_results
    return results


def _run_batch(
    work: Callable[[LoadedConfig, RunContext], _Result], batch: list[LoadedConfig], context: RunContext
) -> list[_Result]:
    return [work(loaded, context) for loaded in batch]
