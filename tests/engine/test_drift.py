"""``patchgen --check``: the files on disk equal what generation would write now, or exit 1.

Each case runs twice: with the content-hash check cache the project
configures (the everyday path), and with ``--no-cache`` (full regeneration).
A stale cache may cost time but must never hide drift.
"""

from __future__ import annotations

import shutil

import pytest

from .projects import TOY_MOE_MODULE, Project, config_source

TOY = "zoo/toy/generated/patched_modeling_toy_gpu.py"
TOY_DIFF = "zoo/toy/generated/patched_modeling_toy_gpu.diff"

GPU = """
config.exclude_from_output("ToyTalker")

@config.override_method("ToyMLP.forward", description="no scale")
def mlp_forward(self, x):
    return toy_activation(x)
"""


@pytest.fixture(params=["cache", "no-cache"])
def check(request) -> tuple[str, ...]:
    """The ``--check`` command line, with or without the check cache."""
    return ("--check",) if request.param == "cache" else ("--check", "--no-cache")


@pytest.fixture
def zoo(project: Project) -> Project:
    """A project with two configs, generated with ``generate-all`` and checked once (so the cache is warm)."""
    project.config("toy", config_source(GPU))
    project.config(
        "toy_moe",
        config_source("", source_module=TOY_MOE_MODULE, target="patched_modeling_toy_moe_gpu.py"),
    )
    assert project.generate_all().code == 0
    assert project.run("--check").code == 0
    return project


def _generated(project: Project) -> dict[str, bytes]:
    return {k: v for k, v in project.snapshot().items() if "/generated/" in k}


def test_check_passes_right_after_generation(zoo, check):
    result = zoo.run(*check, "-v")

    assert result.code == 0, result.out + result.err
    assert "2 config(s) up to date" in result.out
    assert "drift" not in result.out


def test_check_is_silent_without_verbose_when_nothing_drifted(zoo, check):
    result = zoo.run(*check)

    assert (result.code, result.out, result.err) == (0, "", "")


def test_check_catches_a_hand_edited_generated_file(zoo, check):
    path = zoo.root / TOY
    path.write_text(path.read_text(encoding="utf-8").replace("return toy_activation(x)", "return x"), encoding="utf-8")
    before = zoo.snapshot()

    result = zoo.run(*check)

    assert result.code == 1
    assert f"drift: {TOY} (differs)" in result.out
    assert "1 generated file(s) out of date; run `patchgen --check --fix` or `generate-all`" in result.out
    assert zoo.snapshot() == before


def test_check_catches_a_whitespace_only_edit_of_a_generated_file(zoo, check):
    path = zoo.root / TOY
    path.write_text(path.read_text(encoding="utf-8") + "\n", encoding="utf-8")

    result = zoo.run(*check)

    assert result.code == 1
    assert f"drift: {TOY} (differs)" in result.out


def test_check_catches_an_edited_diff(zoo, check):
    path = zoo.root / TOY_DIFF
    path.write_text(path.read_text(encoding="utf-8").replace("+", "-", 1), encoding="utf-8")

    result = zoo.run(*check)

    assert result.code == 1
    assert f"drift: {TOY_DIFF} (differs)" in result.out


def test_check_catches_a_comment_only_edit_of_a_config(zoo, check):
    config = zoo.root / "zoo/toy/toy_gpu_patch_gen_config.py"
    config.write_text(
        "# a comment changes no patch, but it is an input\n" + config.read_text(encoding="utf-8"), encoding="utf-8"
    )

    result = zoo.run(*check)

    assert result.code == 1
    assert f"drift: {TOY} (differs)" in result.out


def test_check_catches_a_config_edit_that_changes_a_patch(zoo, check):
    config = zoo.root / "zoo/toy/toy_gpu_patch_gen_config.py"
    config.write_text(
        config.read_text(encoding="utf-8").replace("return toy_activation(x)", "return 3 * x"), encoding="utf-8"
    )

    result = zoo.run(*check)

    assert result.code == 1
    assert f"drift: {TOY} (differs)" in result.out
    assert f"drift: {TOY_DIFF} (differs)" in result.out


def test_check_catches_an_edited_module_the_config_imports_relatively(project, check):
    project.write("zoo/toy/common.py", 'DESCRIPTION = "first wording"\n')
    project.config(
        "toy",
        config_source(
            """
            @config.override_method("ToyMLP.forward", description=DESCRIPTION)
            def mlp_forward(self, x):
                return x
            """,
            header="from .common import DESCRIPTION\n",
        ),
    )
    assert project.generate_all().code == 0
    assert project.run("--check").code == 0
    project.write("zoo/toy/common.py", 'DESCRIPTION = "second wording"\n')

    result = project.run(*check)

    assert result.code == 1, result.out
    assert f"drift: {TOY} (differs)" in result.out


def test_check_catches_an_edited_module_the_config_imports_from_its_package(project, check):
    project.write("zoo/toy/common.py", 'DESCRIPTION = "first wording"\n')
    project.config(
        "toy",
        config_source(
            """
            @config.override_method("ToyMLP.forward", description=common.DESCRIPTION)
            def mlp_forward(self, x):
                return x
            """,
            header="from zoo.toy import common\n",
        ),
    )
    assert project.generate_all().code == 0
    assert project.run("--check").code == 0
    project.write("zoo/toy/common.py", 'DESCRIPTION = "second wording"\n')

    result = project.run(*check)

    assert result.code == 1, result.out
    assert f"drift: {TOY} (differs)" in result.out


def test_check_catches_a_comment_only_edit_of_a_module_the_config_imports_relatively(project, check):
    project.write("zoo/toy/common.py", 'DESCRIPTION = "wording"\n')
    project.config(
        "toy",
        config_source(
            """
            @config.override_method("ToyMLP.forward", description=DESCRIPTION)
            def mlp_forward(self, x):
                return x
            """,
            header="from .common import DESCRIPTION\n",
        ),
    )
    assert project.generate_all().code == 0
    assert project.run("--check").code == 0
    project.write("zoo/toy/common.py", '# a comment is still an input\nDESCRIPTION = "wording"\n')

    result = project.run(*check)

    assert result.code == 1, result.out
    assert f"drift: {TOY} (differs)" in result.out


def test_check_catches_a_comment_only_edit_of_an_upstream_base_class_module(project, check):
    project.config(
        "toy",
        config_source(
            """
            @config.override_method("ToyForSequenceClassification.forward")
            def forward(self, input_ids=None, labels=None, **kwargs):
                return None
            """
        ),
    )
    assert project.generate_all().code == 0
    assert project.run("--check").code == 0
    base = project.site / "toyupstream/modeling_layers.py"
    base.write_text("# upstream touched this file\n" + base.read_text(encoding="utf-8"), encoding="utf-8")

    result = project.run(*check)

    assert result.code == 1, result.out
    assert f"drift: {TOY} (differs)" in result.out


def test_check_catches_an_edited_snippet(project, snippet_dir, check):
    template = snippet_dir / "identity_forward.py.j2"
    template.write_text("{# the first wording #}\ndef forward(self, x):\n    return x\n", encoding="utf-8")
    project.config("toy", config_source('config.apply_snippet("identity_forward", "ToyMLP.forward")\n'))
    assert project.generate_all().code == 0
    assert project.run("--check").code == 0
    template.write_text(
        "{# a comment-only edit is still an input change #}\ndef forward(self, x):\n    return x\n", encoding="utf-8"
    )

    result = project.run(*check)

    assert result.code == 1
    assert f"drift: {TOY} (differs)" in result.out


def test_check_catches_an_upstream_source_change(zoo, check):
    upstream = zoo.site / "toyupstream/models/toy/modeling_toy.py"
    upstream.write_text(
        upstream.read_text(encoding="utf-8").replace("DEFAULT_SCALE: float = 0.5", "DEFAULT_SCALE: float = 0.25"),
        encoding="utf-8",
    )

    result = zoo.run(*check)

    assert result.code == 1
    assert f"drift: {TOY} (differs)" in result.out


def test_check_catches_a_change_in_a_base_class_module_upstream(project, check):
    project.config(
        "toy",
        config_source(
            """
            @config.override_method("ToyForSequenceClassification.forward")
            def forward(self, input_ids=None, labels=None, **kwargs):
                return None
            """
        ),
    )
    assert project.generate_all().code == 0
    assert project.run("--check").code == 0
    base = project.site / "toyupstream/modeling_layers.py"
    base.write_text(
        base.read_text(encoding="utf-8").replace("labels=None", "labels=None, weights=None"), encoding="utf-8"
    )

    result = project.run(*check)

    assert result.code == 2
    assert "missing upstream parameter weights" in result.err


def test_check_catches_an_upstream_version_bump(zoo, check):
    (zoo.site / "toyupstream-1.0.dist-info").rename(zoo.site / "toyupstream-1.1.dist-info")
    metadata = zoo.site / "toyupstream-1.1.dist-info/METADATA"
    metadata.write_text(metadata.read_text(encoding="utf-8").replace("Version: 1.0", "Version: 1.1"), encoding="utf-8")

    result = zoo.run(*check)

    assert result.code == 1, result.out
    assert f"drift: {TOY} (generated from toyupstream==1.0, but toyupstream==1.1 is installed)" in result.out


def test_check_after_a_version_bump_reports_drift_even_where_a_config_no_longer_generates(zoo, check):
    (zoo.site / "toyupstream-1.0.dist-info").rename(zoo.site / "toyupstream-1.1.dist-info")
    metadata = zoo.site / "toyupstream-1.1.dist-info/METADATA"
    metadata.write_text(metadata.read_text(encoding="utf-8").replace("Version: 1.0", "Version: 1.1"), encoding="utf-8")
    upstream = zoo.site / "toyupstream/models/toy/modeling_toy.py"
    upstream.write_text(upstream.read_text(encoding="utf-8").replace("ToyMLP", "ToyFeedForward"))  # a target gone

    result = zoo.run(*check)

    assert result.code == 1, result.err
    assert f"drift: {TOY} (generated from toyupstream==1.0" in result.out


def test_check_catches_a_deleted_generated_file(zoo, check):
    (zoo.root / TOY).unlink()

    result = zoo.run(*check)

    assert result.code == 1
    assert f"drift: {TOY} (missing)" in result.out


def test_check_catches_an_orphaned_generated_file(zoo, check):
    shutil.copy(zoo.root / TOY, zoo.root / "zoo/toy/generated/patched_modeling_toy_old.py")

    result = zoo.run(*check)

    assert result.code == 1
    assert "drift: zoo/toy/generated/patched_modeling_toy_old.py (orphaned)" in result.out


def test_check_reports_outputs_of_a_deleted_config_as_orphans(zoo, check):
    (zoo.root / "zoo/toy_moe/toy_moe_gpu_patch_gen_config.py").unlink()

    result = zoo.run(*check)

    assert result.code == 1
    assert "drift: zoo/toy_moe/generated/patched_modeling_toy_moe_gpu.py (orphaned)" in result.out
    assert "drift: zoo/toy_moe/generated/patched_modeling_toy_moe_gpu.diff (orphaned)" in result.out


def test_a_corrupt_check_cache_is_ignored_not_trusted(zoo):
    (zoo.root / ".patchgen_cache/check-cache.json").write_text("{not json", encoding="utf-8")
    (zoo.root / TOY).write_text("# edited\n", encoding="utf-8")

    result = zoo.run("--check")

    assert result.code == 1
    assert f"drift: {TOY} (differs)" in result.out


def test_a_check_cache_entry_tampered_to_look_clean_is_not_trusted(zoo):
    import json

    cache_file = zoo.root / ".patchgen_cache/check-cache.json"
    data = json.loads(cache_file.read_text(encoding="utf-8"))
    (zoo.root / TOY).write_text("# edited\n", encoding="utf-8")
    entry = data["entries"]["zoo.toy.toy_gpu_patch_gen_config"]
    entry["outputs"] = {p: "0" * 64 for p in entry["outputs"]}
    cache_file.write_text(json.dumps(data), encoding="utf-8")

    result = zoo.run("--check")

    assert result.code == 1
    assert f"drift: {TOY} (differs)" in result.out


# -- --check --fix ------------------------------------------------------------------------------------------


def _fix_then_check(project: Project, check: tuple[str, ...]) -> str:
    fixed = project.run(*check, "--fix")
    assert fixed.code == 0, fixed.out + fixed.err
    again = project.run(*check)
    assert again.code == 0, again.out
    return fixed.out


def test_fix_restores_a_hand_edited_generated_file(zoo, check):
    generated = _generated(zoo)
    (zoo.root / TOY).write_text("# edited by hand\n", encoding="utf-8")

    out = _fix_then_check(zoo, check)

    assert f"fixed: {TOY} (differs)" in out
    assert _generated(zoo) == generated


def test_fix_restores_an_edited_diff(zoo, check):
    generated = _generated(zoo)
    (zoo.root / TOY_DIFF).write_text("edited\n", encoding="utf-8")

    _fix_then_check(zoo, check)

    assert _generated(zoo) == generated


def test_fix_restores_a_deleted_generated_file(zoo, check):
    generated = _generated(zoo)
    (zoo.root / TOY).unlink()

    out = _fix_then_check(zoo, check)

    assert f"fixed: {TOY} (missing)" in out
    assert _generated(zoo) == generated


def test_fix_removes_an_orphaned_generated_file(zoo, check):
    generated = _generated(zoo)
    orphan = zoo.root / "zoo/toy/generated/patched_modeling_toy_old.py"
    orphan.write_text("# no config\n", encoding="utf-8")

    out = _fix_then_check(zoo, check)

    assert "fixed: zoo/toy/generated/patched_modeling_toy_old.py (orphaned)" in out
    assert not orphan.exists()
    assert _generated(zoo) == generated


def test_fix_regenerates_after_a_config_edit(zoo, check):
    config = zoo.root / "zoo/toy/toy_gpu_patch_gen_config.py"
    config.write_text(
        config.read_text(encoding="utf-8").replace("return toy_activation(x)", "return 3 * x"), encoding="utf-8"
    )

    _fix_then_check(zoo, check)

    assert "        return 3 * x\n" in zoo.generated("toy")


def test_fix_regenerates_after_a_snippet_edit(project, snippet_dir, check):
    template = snippet_dir / "identity_forward.py.j2"
    template.write_text("def forward(self, x):\n    return x\n", encoding="utf-8")
    project.config("toy", config_source('config.apply_snippet("identity_forward", "ToyMLP.forward")\n'))
    assert project.generate_all().code == 0
    template.write_text("def forward(self, x):\n    return 2 * x\n", encoding="utf-8")

    _fix_then_check(project, check)

    assert "        return 2 * x\n" in project.generated("toy")


def test_fix_output_equals_a_fresh_generation(zoo, check):
    (zoo.root / TOY).write_text("# edited\n", encoding="utf-8")
    (zoo.root / TOY_DIFF).unlink()
    assert zoo.run(*check, "--fix").code == 0
    fixed = _generated(zoo)

    for folder in zoo.root.glob("zoo/*/generated"):
        shutil.rmtree(folder)
    assert zoo.generate_all().code == 0

    assert _generated(zoo) == fixed
