"""Every ``patchgen`` flag and ``generate-all``, in-process and as real processes; exit codes 0 / 1 / 2 / 3."""

from __future__ import annotations

import pytest

from .projects import TOY_MODULE, TOY_MOE_MODULE, Project, config_source

TOY = "zoo/toy/generated/patched_modeling_toy_gpu.py"
TOY_DIFF = "zoo/toy/generated/patched_modeling_toy_gpu.diff"
MOE = "zoo/toy_moe/generated/patched_modeling_toy_moe_gpu.py"
MOE_DIFF = "zoo/toy_moe/generated/patched_modeling_toy_moe_gpu.diff"
ALL_FOUR = sorted([TOY, TOY_DIFF, MOE, MOE_DIFF])

GPU = """
config.exclude_from_output("ToyTalker")

@config.override_method("ToyMLP.forward", description="no scale")
def mlp_forward(self, x):
    return toy_activation(x)
"""

TWO_CONFIGS = f"""
from modelgraft.generator import PatchConfig

first = PatchConfig({TOY_MODULE!r}, "patched_modeling_toy_first.py", description="first")
second = PatchConfig({TOY_MODULE!r}, "patched_modeling_toy_second.py", description="second")
second.exclude_from_output("ToyTalker")
"""


def two_models(project: Project) -> Project:
    project.config("toy", config_source(GPU))
    project.config(
        "toy_moe", config_source("", source_module=TOY_MOE_MODULE, target="patched_modeling_toy_moe_gpu.py")
    )
    return project


def generated_files(project: Project) -> list[str]:
    return sorted(k for k in project.snapshot() if "/generated/" in k)


# -- selecting configs ----------------------------------------------------------------------------------------


def test_a_dotted_config_module_generates_only_that_config(project):
    two_models(project)

    result = project.run(project.module("toy"))

    assert result.code == 0, result.err
    assert generated_files(project) == [TOY]
    assert result.out == f"wrote {TOY}\n"


def test_a_config_given_as_a_file_path_generates_that_config(project):
    two_models(project)

    result = project.run("zoo/toy/toy_gpu_patch_gen_config.py")

    assert result.code == 0, result.err
    assert generated_files(project) == [TOY]


def test_a_config_path_is_relative_to_the_working_directory(project):
    two_models(project)

    result = project.run("toy_gpu_patch_gen_config.py", cwd=project.root / "zoo" / "toy")

    assert result.code == 0, result.err
    assert generated_files(project) == [TOY]


def test_several_config_modules_in_one_call(project):
    two_models(project)

    result = project.run(project.module("toy"), project.module("toy_moe"))

    assert result.code == 0, result.err
    assert generated_files(project) == [TOY, MOE]


def test_all_generates_every_discovered_config(project):
    two_models(project)

    result = project.run("--all")

    assert result.code == 0, result.err
    assert generated_files(project) == [TOY, MOE]


def test_an_unknown_config_module_is_an_error(project):
    two_models(project)

    result = project.run("zoo.toy.no_such_patch_gen_config")

    assert result.code == 2
    assert "config zoo.toy.no_such_patch_gen_config: no config file zoo/toy/no_such_patch_gen_config.py" in result.err


def test_a_missing_config_file_is_an_error(project):
    two_models(project)

    result = project.run("zoo/toy/missing_patch_gen_config.py")

    assert result.code == 2
    assert "no such config file zoo/toy/missing_patch_gen_config.py" in result.err


def test_a_config_file_outside_the_project_is_an_error(project, tmp_path):
    two_models(project)
    outside = tmp_path / "outside_patch_gen_config.py"
    outside.write_text("", encoding="utf-8")

    result = project.run(str(outside))

    assert result.code == 2
    assert f"lies outside the project root {project.root}" in result.err


def test_no_config_and_no_all_is_an_error(project):
    two_models(project)
    before = project.snapshot()

    result = project.run()

    assert result.code == 2
    assert "name a config module, or pass --all" in result.err
    assert project.snapshot() == before


# -- -c NAME ----------------------------------------------------------------------------------------------------------


def test_a_module_with_two_patchconfigs_needs_c(project):
    project.config("toy", TWO_CONFIGS)
    before = project.snapshot()

    result = project.run(project.module("toy"))

    assert result.code == 2
    assert (
        "config zoo.toy.toy_gpu_patch_gen_config (zoo/toy/toy_gpu_patch_gen_config.py): defines several PatchConfig objects; choose one with -c NAME"
        in result.err
    )
    assert project.snapshot() == before


def test_c_selects_one_of_several_patchconfigs(project):
    project.config("toy", TWO_CONFIGS)

    result = project.run(project.module("toy"), "-c", "second")

    assert result.code == 0, result.err
    assert sorted(k for k in project.snapshot() if "/generated/" in k) == [
        "zoo/toy/generated/patched_modeling_toy_second.py"
    ]
    assert "# Description: second" in (project.root / "zoo/toy/generated/patched_modeling_toy_second.py").read_text(
        encoding="utf-8"
    )


def test_c_naming_no_patchconfig_is_an_error(project):
    project.config("toy", TWO_CONFIGS)

    result = project.run(project.module("toy"), "-c", "third")

    assert result.code == 2
    assert (
        "config zoo.toy.toy_gpu_patch_gen_config (zoo/toy/toy_gpu_patch_gen_config.py): has no PatchConfig named 'third'"
        in result.err
    )


def test_c_with_several_modules_is_an_error(project):
    two_models(project)

    result = project.run(project.module("toy"), project.module("toy_moe"), "-c", "config")

    assert result.code == 2
    assert "-c NAME selects a variable in one config module; name exactly one" in result.err


def test_a_patchconfig_imported_from_a_sibling_is_not_the_modules_own(project):
    project.config("toy", config_source(GPU))
    project.config(
        "toy",
        config_source(
            "config.inherit_from(gpu)\n",
            target="patched_modeling_toy_npu.py",
            header="from zoo.toy.toy_gpu_patch_gen_config import config as gpu\n",
        ),
        backend="npu",
    )

    result = project.run(project.module("toy", backend="npu"))

    assert result.code == 0, result.err
    assert generated_files(project) == ["zoo/toy/generated/patched_modeling_toy_npu.py"]


# -- -o DIR ---------------------------------------------------------------------------------------------------------


def test_o_writes_into_the_given_folder_instead_of_generated(project, tmp_path):
    two_models(project)
    out = tmp_path / "out"

    result = project.run(project.module("toy"), "--diff", "-o", str(out))

    assert result.code == 0, result.err
    assert sorted(p.name for p in out.iterdir()) == ["patched_modeling_toy_gpu.diff", "patched_modeling_toy_gpu.py"]
    assert generated_files(project) == []


def test_o_with_a_relative_folder_is_relative_to_the_working_directory(project):
    two_models(project)

    result = project.run(project.module("toy"), "-o", "build/out", cwd=project.root / "zoo")

    assert result.code == 0, result.err
    assert (project.root / "zoo/build/out/patched_modeling_toy_gpu.py").is_file()


# -- --list -----------------------------------------------------------------------------------------------------------


def test_list_with_a_module_lists_its_patches_and_writes_nothing(project):
    two_models(project)
    before = project.snapshot()

    result = project.run(project.module("toy"), "--list")

    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        f"zoo.toy.toy_gpu_patch_gen_config: {TOY_MODULE} -> patched_modeling_toy_gpu.py",
        "  override_method   ToyMLP.forward  (no scale)",
        "  exclude           ToyTalker",
    ]
    assert project.snapshot() == before


def test_list_without_a_module_lists_every_discovered_config(project):
    two_models(project)
    before = project.snapshot()

    result = project.run("--list")

    assert result.code == 0, result.err
    assert [line for line in result.out.splitlines() if not line.startswith(" ")] == [
        f"zoo.toy.toy_gpu_patch_gen_config: {TOY_MODULE} -> patched_modeling_toy_gpu.py",
        f"zoo.toy_moe.toy_moe_gpu_patch_gen_config: {TOY_MOE_MODULE} -> patched_modeling_toy_moe_gpu.py",
    ]
    assert project.snapshot() == before


# -- --dry-run, --diff, -v ----------------------------------------------------------------------------------------------


def test_dry_run_writes_nothing_and_says_what_it_would_write(project):
    two_models(project)
    before = project.snapshot()

    result = project.run("--all", "--diff", "--dry-run")

    assert result.code == 0, result.err
    assert project.snapshot() == before
    assert result.out.splitlines() == [
        f"would write {TOY_DIFF}",
        f"would write {TOY}",
        f"would write {MOE_DIFF}",
        f"would write {MOE}",
    ]


def test_dry_run_on_an_up_to_date_tree_would_write_nothing(project):
    two_models(project)
    assert project.generate_all().code == 0
    before = project.snapshot()

    result = project.run("--all", "--diff", "--dry-run")

    assert (result.code, result.out) == (0, "")
    assert project.snapshot() == before


def test_dry_run_names_only_the_files_that_would_change(project):
    two_models(project)
    assert project.generate_all().code == 0
    (project.root / TOY).write_text("# stale\n", encoding="utf-8")

    result = project.run("--all", "--diff", "--dry-run")

    assert result.out == f"would write {TOY}\n"
    assert (project.root / TOY).read_text(encoding="utf-8") == "# stale\n"


def test_diff_writes_a_unified_diff_against_upstream(project):
    two_models(project)

    result = project.run(project.module("toy"), "--diff")

    assert result.code == 0, result.err
    diff = (project.root / TOY_DIFF).read_text(encoding="utf-8")
    assert diff.startswith("--- a/toyupstream/models/toy/modeling_toy.py\n+++ b/patched_modeling_toy_gpu.py\n@@ ")
    assert "\n-from .configuration_toy import ToyConfig\n" in diff
    assert "\n+from toyupstream.models.toy.configuration_toy import ToyConfig\n" in diff
    assert "-class ToyTalker:\n" in diff


def test_generation_leaves_no_temporary_files(project):
    two_models(project)

    assert project.generate_all().code == 0

    assert [k for k in project.snapshot() if k.endswith(".tmp")] == []


def test_without_diff_no_diff_is_written(project):
    two_models(project)

    result = project.run(project.module("toy"))

    assert result.code == 0, result.err
    assert not (project.root / TOY_DIFF).exists()


def test_verbose_reports_unchanged_files_and_timing(project):
    two_models(project)
    assert project.generate_all().code == 0

    result = project.run("--all", "--diff", "-v")

    assert result.code == 0
    assert f"unchanged {TOY}" in result.out.splitlines()
    assert f"unchanged {TOY_DIFF}" in result.out.splitlines()
    assert "generated 2 file(s) in " in result.out


def test_without_verbose_unchanged_files_are_not_reported(project):
    two_models(project)
    assert project.generate_all().code == 0

    result = project.run("--all", "--diff")

    assert (result.code, result.out, result.err) == (0, "", "")


# -- --check, --fix, -j ----------------------------------------------------------------------------------------------


def test_check_exits_1_on_drift_and_0_when_clean(project):
    two_models(project)
    assert project.generate_all().code == 0
    assert project.run("--check").code == 0
    (project.root / TOY).write_text("# edited\n", encoding="utf-8")

    assert project.run("--check").code == 1


def test_check_of_one_named_config_ignores_the_others(project):
    two_models(project)
    assert project.generate_all().code == 0
    (project.root / MOE).write_text("# edited\n", encoding="utf-8")

    assert project.run(project.module("toy"), "--check").code == 0
    assert project.run(project.module("toy_moe"), "--check").code == 1


def test_check_fix_rewrites_drifted_files_and_exits_0(project):
    two_models(project)
    assert project.generate_all().code == 0
    expected = (project.root / TOY).read_bytes()
    (project.root / TOY).write_text("# edited\n", encoding="utf-8")

    result = project.run("--check", "--fix")

    assert result.code == 0
    assert f"fixed: {TOY} (differs)" in result.out
    assert (project.root / TOY).read_bytes() == expected


def test_fix_without_check_is_an_error(project):
    two_models(project)
    before = project.snapshot()

    result = project.run("--all", "--fix")

    assert result.code == 2
    assert "--fix only works with --check" in result.err
    assert project.snapshot() == before


def test_jobs_runs_the_batch_in_worker_processes(project):
    two_models(project)

    result = project.run("--all", "--diff", "-j", "2")

    assert result.code == 0, result.err
    assert generated_files(project) == ALL_FOUR


def test_an_internal_error_exits_3_never_1_or_2(project, monkeypatch):
    from modelgraft.generator import pipeline

    def crash(*args, **kwargs):
        raise RuntimeError("simulated bug in patchgen")

    two_models(project)
    monkeypatch.setattr(pipeline, "generate_each", crash)  # the only way to provoke a bug that does not exist
    before = project.snapshot()

    result = project.run("--all")

    assert result.code == 3
    assert "RuntimeError: simulated bug in patchgen" in result.err
    assert "patchgen: internal error" in result.err
    assert project.snapshot() == before


# -- every failure of every config in one run ------------------------------------------------------------------------


def _two_broken(project: Project, toy: str = 'config.exclude_from_output("NoSuchToyClass")\n') -> Project:
    """``toy`` as the toy config's body; the MoE config excludes a class its upstream lacks."""
    project.config("toy", config_source(toy))
    project.config(
        "toy_moe",
        config_source(
            'config.exclude_from_output("NoSuchMoeClass")\n',
            source_module=TOY_MOE_MODULE,
            target="patched_modeling_toy_moe_gpu.py",
        ),
    )
    return project


@pytest.mark.parametrize("mode", [("--all",), ("--all", "--dry-run"), ("--check", "--no-cache")])
def test_every_failing_config_is_reported_in_one_run(project, mode):
    _two_broken(project)
    before = project.snapshot()

    result = project.run(*mode)

    assert result.code == 2, result.out + result.err
    assert "2 errors in 2 config(s)" in result.err
    assert "NoSuchToyClass" in result.err and "NoSuchMoeClass" in result.err
    assert project.snapshot() == before


def test_a_config_that_fails_to_load_is_reported_with_the_others_errors(project):
    _two_broken(project, toy='raise RuntimeError("broken on purpose")\n')

    result = project.run("--all")

    assert result.code == 2
    assert "broken on purpose" in result.err and "NoSuchMoeClass" in result.err


def test_the_errors_of_a_run_do_not_depend_on_the_number_of_workers(project):
    _two_broken(project)

    serial, parallel = project.run("--all", "-j", "1"), project.run("--all", "-j", "2")

    assert serial.err == parallel.err


# -- generate-all -----------------------------------------------------------------------------------------------------


def test_generate_all_is_all_with_diff(project):
    two_models(project)

    result = project.generate_all()

    assert result.code == 0, result.err
    assert generated_files(project) == ALL_FOUR
    all_with_diff = project.snapshot()
    for path in generated_files(project):
        (project.root / path).unlink()
    assert project.run("--all", "--diff").code == 0
    assert project.snapshot() == all_with_diff


def test_generate_all_passes_extra_flags_through(project):
    two_models(project)
    before = project.snapshot()

    result = project.generate_all("--dry-run")

    assert result.code == 0
    assert f"would write {TOY_DIFF}" in result.out
    assert project.snapshot() == before


# -- real processes ---------------------------------------------------------------------------------------------------


def test_python_m_generator_generates_and_checks_in_a_real_process(project):
    two_models(project)

    generated = project.run_subprocess("--all", "--diff")
    checked = project.run_subprocess("--check")

    assert generated.code == 0, generated.err
    assert generated_files(project) == ALL_FOUR
    assert "\x1b[" not in generated.out + generated.err  # no terminal progress in captured (CI) output
    assert checked.code == 0, checked.out + checked.err


def test_generate_all_console_script_in_a_real_process(project):
    two_models(project)

    result = project.run_subprocess(
        code="import sys; from modelgraft.generator.cli import generate_all; sys.exit(generate_all())"
    )

    assert result.code == 0, result.err
    assert generated_files(project) == ALL_FOUR


def test_patchgen_console_script_exit_codes_in_real_processes(project):
    two_models(project)
    assert (
        project.run_subprocess(
            code="import sys; from modelgraft.generator.cli import main; sys.exit(main())", cwd=project.root
        ).code
        == 2
    )
    assert project.run_subprocess("--all", "--diff").code == 0
    (project.root / TOY).write_text("# edited\n", encoding="utf-8")

    drift = project.run_subprocess("--check")
    project.config("toy", config_source('config.exclude_from_output("Nope")\n'))
    error = project.run_subprocess("--all")

    assert drift.code == 1
    assert f"drift: {TOY} (differs)" in drift.out
    assert error.code == 2
    assert (
        "patchgen: error: config zoo.toy.toy_gpu_patch_gen_config (zoo/toy/toy_gpu_patch_gen_config.py), target Nope: cannot exclude"
        in error.err
    )


def test_help_lists_every_flag(project):
    result = project.run_subprocess("--help")

    assert result.code == 0
    for flag in ("-o", "-c", "--list", "--all", "--dry-run", "--diff", "-v", "--check", "--fix", "-j"):
        assert f" {flag}" in result.out
