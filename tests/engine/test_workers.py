"""Configs of one upstream module share a worker; results and errors come back as one process gives them."""

from __future__ import annotations

import os
from types import SimpleNamespace

from modelgraft.generator.workers import _batches, map_configs

from .projects import TOY_MOE_MODULE, config_source
from .test_checks import UNDEFINED

MODULES = ["a", "b", "a", "c", "b", "a", "d"]


def _configs(modules: list[str]) -> list:
    return [SimpleNamespace(name=f"cfg{i}", config=SimpleNamespace(source_module=m)) for i, m in enumerate(modules)]


def _work(loaded, context) -> tuple[str, int]:
    return loaded.name, os.getpid()


def test_the_configs_of_one_upstream_module_go_to_one_worker_largest_groups_first() -> None:
    batches = _batches(_configs(MODULES), 2)

    assert batches == [[0, 2, 5, 6], [1, 4, 3]]
    assert _batches(_configs(MODULES), 9) == [[0, 2, 5], [1, 4], [3], [6]]
    assert _batches(_configs(["a", "a"]), 2) == [[0, 1]]


def test_results_come_back_in_config_order_from_the_workers() -> None:
    configs = _configs(MODULES)

    results = map_configs(_work, configs, SimpleNamespace(jobs=2))

    assert [name for name, _ in results] == [c.name for c in configs]
    pids = {name: pid for name, pid in results}
    assert pids["cfg0"] == pids["cfg2"] == pids["cfg5"] and pids["cfg1"] == pids["cfg4"]
    assert os.getpid() not in pids.values()


def test_one_upstream_module_runs_in_process() -> None:
    results = map_configs(_work, _configs(["a", "a", "a"]), SimpleNamespace(jobs=2))

    assert {pid for _, pid in results} == {os.getpid()}


def test_two_workers_report_the_error_one_process_reports(project) -> None:
    # toy fails a final check (an undefined name, after ruff); toy_moe, in the other worker, fails planning.
    project.config("toy", config_source(UNDEFINED))
    project.config(
        "toy_moe",
        config_source(
            'config.replace_function("no_such_function", replacement="def no_such_function():\\n    pass\\n")\n',
            source_module=TOY_MOE_MODULE,
            target="patched_modeling_toy_moe_gpu.py",
        ),
    )

    errors = {jobs: project.run("--all", "-j", jobs).err for jobs in ("1", "2")}

    assert errors["1"] == errors["2"]
    assert "config zoo.toy_moe.toy_moe_gpu_patch_gen_config" in errors["2"]
