"""``copier copy --trust . models/<m>``: the dense scaffold renders, generates and passes its tests untouched.

Mistral is the model that is not in the zoo: the whole path (copy, the generation task, its parity tests
against upstream transformers, both backends) runs for it in a real repository. The other tests check
what gets rendered: the zoo's hand-written files, the recipe arguments, the line lengths, the errors.
"""

from __future__ import annotations

from pathlib import Path

import copier
import pytest

from .repos import copy_model, git, ruff, run, working_directory

CATEGORIES_NOT_YET = ("moe", "vlm", "vlm_moe", "omni", "omni_moe")


def _assert_ruff_clean(repo: Path, model_dir: Path) -> None:
    relative = str(model_dir.relative_to(repo))
    for args in (("check", relative), ("format", "--check", relative)):
        result = ruff(repo, *args)
        assert result.returncode == 0, f"ruff {' '.join(args)}:\n{result.stdout}{result.stderr}"


def test_dense_scaffold_generates_both_backends_and_passes_its_parity_tests(repo: Path) -> None:
    assert not (repo / "models" / "mistral").exists(), "mistral joined the zoo: scaffold another model here"
    model_dir = copy_model(repo, "mistral", prefix="Mistral", npu=True)

    assert sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*") if p.is_file()) == [
        ".copier-answers.yml",
        "__init__.py",
        "generated/patched_modeling_mistral_gpu.diff",
        "generated/patched_modeling_mistral_gpu.py",
        "generated/patched_modeling_mistral_npu.diff",
        "generated/patched_modeling_mistral_npu.py",
        "mistral_gpu_patch_gen_config.py",
        "mistral_npu_patch_gen_config.py",
        "tests/__init__.py",
        "tests/test_mistral_parity.py",
    ]
    configs = ("models.mistral.mistral_gpu_patch_gen_config", "models.mistral.mistral_npu_patch_gen_config")
    check = run(repo, "-m", "generator", *configs, "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    _assert_ruff_clean(repo, model_dir)

    tests = run(repo, "-m", "pytest", "models/mistral", "-v", "-p", "no:cacheprovider")
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert "[gpu] PASSED" in tests.stdout and "[npu] PASSED" in tests.stdout, tests.stdout[-3000:]
    assert "SKIPPED" not in tests.stdout and "FAILED" not in tests.stdout


def test_gpu_only_scaffold_has_no_npu_files(repo: Path) -> None:
    assert not (repo / "models" / "smollm3").exists(), "smollm3 joined the zoo: scaffold another model here"
    model_dir = copy_model(repo, "smollm3", prefix="SmolLM3")

    assert not list(model_dir.rglob("*npu*"))
    assert (model_dir / "generated" / "patched_modeling_smollm3_gpu.py").is_file()
    init = (model_dir / "__init__.py").read_text(encoding="utf-8")
    assert 'modeling={"gpu": "models.smollm3.generated.patched_modeling_smollm3_gpu"},' in init
    assert "backends=" not in (model_dir / "tests" / "test_smollm3_parity.py").read_text(encoding="utf-8")
    _assert_ruff_clean(repo, model_dir)


@pytest.mark.parametrize(
    ("model", "answers", "as_written"),
    [
        # Everything but the parity test, whose tiny config turns on sliding windows by hand.
        (
            "qwen3",
            {"prefix": "Qwen3", "npu": True},
            ["__init__.py", "qwen3_gpu_patch_gen_config.py", "qwen3_npu_patch_gen_config.py", "tests/__init__.py"],
        ),
        # Everything but the config, whose docstring calls llama "the minimal dense example".
        ("llama", {"prefix": "Llama"}, ["__init__.py", "tests/__init__.py", "tests/test_llama_parity.py"]),
    ],
)
def test_scaffold_is_what_the_zoo_wrote_by_hand(repo: Path, model: str, answers: dict, as_written: list[str]) -> None:
    """Rendered over the zoo's own package, the files a maintainer wrote do not change."""
    copy_model(repo, model, generate=False, **answers)

    changed = git(repo, "status", "--porcelain", "--untracked-files=all", f"models/{model}").splitlines()
    changed = sorted(line[3:].removeprefix(f"models/{model}/") for line in changed)
    assert ".copier-answers.yml" in changed
    assert not set(as_written) & set(changed), git(repo, "diff", f"models/{model}")


def test_recipe_answers_become_dense_text_arguments_as_in_gemma3(repo: Path) -> None:
    model_dir = copy_model(
        repo,
        "gemma3",
        generate=False,
        prefix="Gemma3",
        display_name="Gemma3 text",
        model_type="gemma3_text",
        config_class="Gemma3TextConfig",
        rms_norm="one_plus_weight",
        activation_attr="hidden_activation",
        vocab_size="self.vocab_size",
        logit_softcapping=True,
        sequence_classification="Gemma3TextForSequenceClassification",
    )

    rendered = (model_dir / "gemma3_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    by_hand = git(repo, "show", "HEAD:models/gemma3/gemma3_gpu_patch_gen_config.py")
    call = by_hand[by_hand.index("dense_text(\n") : by_hand.index("\n)\n", by_hand.index("dense_text(\n")) + 3]
    assert call in rendered
    assert "Differences from llama handled by the recipe: the (1 + weight) RMSNorm" in rendered
    assert 'register_model(\n    "gemma3_text",' in (model_dir / "__init__.py").read_text(encoding="utf-8")
    assert "config_class=Gemma3TextConfig," in (model_dir / "tests" / "test_gemma3_parity.py").read_text()
    _assert_ruff_clean(repo, model_dir)


def test_long_names_are_split_as_ruff_formats_them(repo: Path) -> None:
    model = "a_model_name_long_enough_to_split_every_call_and_import"
    model_dir = copy_model(
        repo,
        model,
        generate=False,
        prefix="AModelNameLongEnoughToSplitEveryCallAndImport",
        npu=True,
        mlp_residual_dropout=True,
        logit_softcapping=True,
    )

    assert "import (\n    config as gpu_config,\n)" in (model_dir / f"{model}_npu_patch_gen_config.py").read_text()
    assert "    modeling={\n        " in (model_dir / "__init__.py").read_text(encoding="utf-8")
    assert "dense_text(\n    config,\n" in (model_dir / f"{model}_gpu_patch_gen_config.py").read_text()
    _assert_ruff_clean(repo, model_dir)


@pytest.mark.parametrize("category", CATEGORIES_NOT_YET)
def test_categories_without_a_scaffold_are_refused(repo: Path, category: str) -> None:
    with pytest.raises(
        ValueError, match=r"Invalid choice for 'category': not yet: .* models have no scaffold yet, only dense ones"
    ):
        copy_model(repo, "future_model", prefix="FutureModel", category=category)
    assert not (repo / "models" / "future_model").exists()


def test_model_must_name_the_destination_folder(repo: Path) -> None:
    with pytest.raises(ValueError, match=r"the destination folder is mistral, so the model must be mistral"):
        copy_model(repo, "mistral", model="mistral_v2", prefix="Mistral")
    assert not (repo / "models" / "mistral").exists()


def test_destination_must_be_under_models(repo: Path) -> None:
    with working_directory(repo), pytest.raises(ValueError, match=r"the destination must be models/mistral"):
        copier.run_copy(".", "mistral", data={"prefix": "Mistral"}, defaults=True, unsafe=True, quiet=True)
    assert not (repo / "mistral").exists()


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"prefix": "mistral"}, "must be a class name prefix"),
        ({"model_type": "Mistral"}, "must be a lowercase identifier"),
        ({"display_name": 'The "Mistral"'}, "without quotes or backslashes"),
        ({"vocab_size": 'self.config["vocab_size"]'}, "must be an expression of names"),
        ({"activation_attr": "hidden act"}, "must be an attribute name"),
    ],
)
def test_answers_that_would_not_make_valid_python_are_refused(repo: Path, answers: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        copy_model(repo, "mistral", **{"prefix": "Mistral", **answers})
    assert not (repo / "models" / "mistral").exists()
