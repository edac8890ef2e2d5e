"""Preparing configs in worker processes: one batch of configs per worker, each with its own context.

Forked workers inherit the imported config modules, so a config crosses as its module and variable
name (``LoadedConfig.__reduce__``) and the context as its settings (``RunContext.__getstate__``);
a worker's context caches what its batch parses, and only the prepared results come back.

Configs of one upstream module (a model's GPU and NPU configs) go to the same worker: it parses that
module once and reuses what the first config's snippets parsed, where two workers would each pay
for both.
"""

from __future__ import annotations

import functools
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
    return map_batches(functools.partial(_run_batch, work), configs, context)


def map_batches(
    work: Callable[[list[LoadedConfig], RunContext], list[_Result]], configs: list[LoadedConfig], context: RunContext
) -> list[_Result]:
    """``work(batch, context)`` (one result per config of the batch, in its order) over the configs split
    into batches, one per worker; the results in the order of ``configs``.

    A batch is the unit a worker can finish alone: the pipeline prepares, normalizes and diffs a whole
    batch in its worker, so nothing but the results comes back to the parent to wait on.
    """
    jobs = context.jobs if context.jobs is not None else default_jobs(len(configs))
    batches = _batches(configs, max(1, min(jobs, len(configs))))
    if len(batches) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return work(list(configs), context)
    with ProcessPoolExecutor(max_workers=len(batches), mp_context=multiprocessing.get_context("fork")) as pool:
        done = pool.map(work, [[configs[i] for i in b] for b in batches], [context] * len(batches))
        results: list[_Result] = [None] * len(configs)  # type: ignore[list-item]
        for batch, batch_results in zip(batches, done, strict=True):
            for i, result in zip(batch, batch_results, strict=True):
                results[i] = result
    return results


def _batches(configs: list[LoadedConfig], jobs: int) -> list[list[int]]:
    """Indexes of ``configs`` per worker: the configs of one upstream module together, the largest
    groups first, each onto the worker with the fewest configs so far."""
    groups: dict[str, list[int]] = {}
    for i, loaded in enumerate(configs):
        groups.setdefault(loaded.config.source_module, []).append(i)
    batches: list[list[int]] = [[] for _ in range(jobs)]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(batches, key=len).extend(group)
    return [batch for batch in batches if batch]


def _run_batch(
    work: Callable[[LoadedConfig, RunContext], _Result], batch: list[LoadedConfig], context: RunContext
) -> list[_Result]:
    """``work`` for each config of ``batch``, in order."""
    return [work(loaded, context) for loaded in batch]
