"""A misuse of the patch API is reported at the config's own file and line, never at a line of generator/dsl."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path

import pytest

from modelgraft.generator import PatchConfig
from modelgraft.generator.errors import PatchApiError

from .projects import TOY_MODULE, config_source

CONFIG_FILE = "zoo/toy/toy_gpu_patch_gen_config.py"
SIBLING = f"""
from modelgraft.generator import PatchConfig

config = PatchConfig({TOY_MODULE!r}, "patched_modeling_toy_base.py")
"""


def misuse_line(project, body: str, marker: str) -> int:
    """Write a config whose ``body`` misuses the DSL; the 1-based line of the config holding ``marker``."""
    path = project.config("toy", config_source(body))
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if marker in line)


def rejected(project, body: str, marker: str, cause: str) -> None:
    """patchgen exits 2, naming the config, the cause and the line of ``marker``; nothing is written."""
    line = misuse_line(project, body, marker)
    before = project.snapshot()

    result = project.run(project.module("toy"))

    assert result.code == 2, result.err
    assert result.err.startswith("patchgen: error: config zoo.toy.toy_gpu_patch_gen_config")
    assert cause in result.err
    assert result.err.rstrip().endswith(f"({CONFIG_FILE}:{line})"), result.err
    assert "generator/dsl" not in result.err
    assert project.snapshot() == before


def test_patchconfig_without_a_py_target_names_the_line(project):
    rejected(
        project,
        'other = PatchConfig("toyupstream.models.toy.modeling_toy", "patched.txt")\n',
        "patched.txt",
        "PatchConfig needs a source module and a .py target file",
    )


def test_override_method_without_a_dot_names_the_line(project):
    rejected(
        project,
        '@config.override_method("NoDot")\ndef forward(self, x):\n    return x\n',
        "NoDot",
        "target NoDot: override_method target must be 'Class.method', got 'NoDot'",
    )


def test_a_from_import_without_names_names_the_line(project):
    rejected(
        project,
        'config.add_import("modelgraft.models.ops.slots")\n',
        "add_import",
        "add_import('modelgraft.models.ops.slots') needs names= for a from-import, or is_from_import=False",
    )


def test_inherit_from_skipping_a_target_the_sibling_lacks_names_the_line(project):
    project.write("zoo/toy/toy_base.py", SIBLING)
    rejected(
        project,
        "from zoo.toy.toy_base import config as base\n\nconfig.inherit_from(base, skip_targets=('ToyMLP.forward',))\n",
        "inherit_from",
        "has no patch for skip_targets ['ToyMLP.forward']",
    )


def test_require_upstream_version_with_a_check_that_is_no_dotted_path_names_the_line(project):
    rejected(
        project,
        'config.require_upstream_version(check="require_generated_from")\n',
        "require_upstream_version",
        "require_upstream_version: check must be a dotted 'module.function', got 'require_generated_from'",
    )


def test_require_upstream_version_with_a_second_check_names_the_line(project):
    rejected(
        project,
        'config.require_upstream_version(check="zoo_ext.a.check")\nconfig.require_upstream_version(check="zoo_ext.b.check")\n',
        "zoo_ext.b.check",
        "this config already calls 'zoo_ext.a.check', not 'zoo_ext.b.check'; an output has one version check",
    )


def test_apply_snippet_with_a_misspelt_kind_names_the_line(project):
    rejected(
        project,
        'config.apply_snippet("rms_norm_guard", "ToyRMSNorm", kind="replace_clas")\n',
        "replace_clas",
        "target ToyRMSNorm: apply_snippet('rms_norm_guard'): kind must be one of override_method, replace_function, "
        "replace_class, modify_init, got 'replace_clas'",
    )


def test_an_unknown_patch_option_names_the_line(project):
    rejected(
        project,
        '@config.override_method("ToyMLP.forward", keep_decorator=False)\ndef forward(self, x):\n    return x\n',
        "keep_decorator",
        "target ToyMLP.forward: override_method: unknown option(s) keep_decorator",
    )


def test_outside_the_cli_the_error_names_the_calling_line():
    config = PatchConfig(TOY_MODULE, "patched_modeling_toy_gpu.py")
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(PatchApiError) as raised:
        config.override_method("NoDot")

    here = Path(__file__).resolve().relative_to(Path.cwd().resolve()).as_posix()
    assert raised.value.location == f"{here}:{line}"
    assert str(raised.value).endswith(f"({here}:{line})")


def test_a_patch_api_error_is_still_a_value_error():
    config = PatchConfig(TOY_MODULE, "patched_modeling_toy_gpu.py")

    with pytest.raises(ValueError, match="needs names="):
        config.add_import("modelgraft.models.ops.slots")


def test_a_patch_api_error_keeps_its_location_through_pickling_and_added_context():
    error = PatchApiError("the cause", target="NoDot", location="zoo/toy/toy_gpu_patch_gen_config.py:5")

    restored = pickle.loads(pickle.dumps(error.with_context(config="zoo.toy.toy_gpu_patch_gen_config")))

    assert str(restored) == (
        "config zoo.toy.toy_gpu_patch_gen_config, target NoDot: the cause (zoo/toy/toy_gpu_patch_gen_config.py:5)"
    )
