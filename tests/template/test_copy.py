"""``copier copy --trust . models/<m>``: each category's scaffold renders, generates and passes its tests untouched.

Mistral is the dense model that is not in the zoo: the whole path (copy, the generation task, its parity
tests against upstream transformers, both backends) runs for it in a real repository. No MoE model of the
pinned transformers outside the zoo fits the MoE recipe as it is (docs/scaffolding.md), so the MoE path runs
for qwen3_moe copied into a repository that lacks it. The other tests check what gets rendered: the recipe
arguments, the line lengths, the errors (the zoo's own files: test_adoption.py).
"""

from __future__ import annotations

from pathlib import Path

import copier
import pytest

from .repos import commit_all, copy_model, git, recorded_answers, ruff, run, working_directory

CATEGORIES_NOT_YET = ("vlm", "vlm_moe", "omni", "omni_moe")


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


def test_moe_scaffold_reproduces_qwen3_moe_generates_it_and_passes_its_parity_tests(repo: Path) -> None:
    """qwen3_moe's recorded answers, copied into a repository without it: the zoo's package, byte for byte."""
    answers = recorded_answers(repo / "models" / "qwen3_moe")
    git(repo, "rm", "-r", "--quiet", "models/qwen3_moe")
    commit_all(repo, "qwen3_moe leaves the zoo")

    model_dir = copy_model(repo, "qwen3_moe", **answers)

    rendered = sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*") if p.is_file())
    assert rendered == [
        ".copier-answers.yml",
        "__init__.py",
        "checkpoint.py",
        "generated/patched_modeling_qwen3_moe_gpu.diff",
        "generated/patched_modeling_qwen3_moe_gpu.py",
        "qwen3_moe_gpu_patch_gen_config.py",
        "tests/__init__.py",
        "tests/test_qwen3_moe_parity.py",
    ]
    # Rendered files and generated modeling alike: what v0.1.0 holds (the zoo), byte for byte.
    git(repo, "add", "--all", "models/qwen3_moe")
    assert git(repo, "diff", "--cached", "--stat", "v0.1.0", "--", "models/qwen3_moe") == ""
    check = run(repo, "-m", "generator", "models.qwen3_moe.qwen3_moe_gpu_patch_gen_config", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    _assert_ruff_clean(repo, model_dir)

    tests = run(repo, "-m", "pytest", "models/qwen3_moe", "-v", "-p", "no:cacheprovider")
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert "test_per_expert_checkpoint_loads_to_upstream_logits[gpu] PASSED" in tests.stdout, tests.stdout[-3000:]
    assert "test_the_model_type_has_a_checkpoint_converter PASSED" in tests.stdout, tests.stdout[-3000:]
    assert "SKIPPED" not in tests.stdout and "FAILED" not in tests.stdout


def test_dense_scaffold_has_no_moe_files_nor_questions(repo: Path) -> None:
    model_dir = copy_model(repo, "smollm3", generate=False, prefix="SmolLM3")

    assert not (model_dir / "checkpoint.py").exists()
    assert "register_converter" not in (model_dir / "__init__.py").read_text(encoding="utf-8")
    assert "sparse_block" not in recorded_answers(model_dir)
    assert {"mlp_residual_dropout", "logit_softcapping"} <= set(recorded_answers(model_dir))


@pytest.mark.parametrize("npu", [False, True], ids=["gpu", "gpu+npu"])
def test_moe_answers_become_moe_text_arguments_converter_and_test_sizes(repo: Path, npu: bool) -> None:
    """A MoE model unlike qwen3_moe (answers made up to reach every branch), rendered only."""
    model = "a_moe_model_named_to_hug_its_calls"
    model_dir = copy_model(
        repo,
        model,
        generate=False,
        prefix="AMoe",
        category="moe",
        npu=npu,
        rms_norm="one_plus_weight",
        vocab_size="self.config.vocab_size",
        sparse_block="AMoeMoe",
        num_experts_attr="num_local_experts",
        expert_intermediate_attr="intermediate_size",
        norm_topk_prob=False,
        hf_conversion=model,
    )

    answers = recorded_answers(model_dir)
    assert {"mlp_residual_dropout", "logit_softcapping"}.isdisjoint(answers)
    assert answers["sparse_block"] == "AMoeMoe" and answers["hub_checkpoint"] == ""
    config = (model_dir / f"{model}_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    assert "from generator.recipes import moe_text\n" in config
    assert (
        'moe_text(\n    config,\n    prefix="AMoe",\n    rms_norm="one_plus_weight",\n'
        '    vocab_size="self.config.vocab_size",\n    sparse_block="AMoeMoe",\n)\n'
    ) in config
    assert "Differences from qwen3_moe handled by the recipe: the (1 + weight) RMSNorm" in config
    init = (model_dir / "__init__.py").read_text(encoding="utf-8")
    assert f'register_converter(\n    "{model}", "models.{model}.checkpoint.checkpoint_converter"\n)\n' in init
    converter = (model_dir / "checkpoint.py").read_text(encoding="utf-8")
    assert "num_experts=config.num_local_experts," in converter
    assert "intermediate_size=config.intermediate_size," in converter
    assert f'with its own "{model}" conversion' in converter and "Hub checkpoints store" in converter
    parity = (model_dir / "tests" / f"test_{model}_parity.py").read_text(encoding="utf-8")
    assert '    num_experts_attr="num_local_experts",\n' in parity
    assert '"num_local_experts": 7,' in parity and '"intermediate_size": 28,' in parity
    assert '"norm_topk_prob": False,' in parity and "``norm_topk_prob`` is off" in parity
    assert '["AMoeMoe", "AMoeMLP", "AMoeMoe"]' in parity
    assert (
        f"    model = build_model(\n        {model.upper()}.config(), architecture={model.upper()}.causal_lm\n    )\n"
        in parity
    )
    assert ('    backends=("gpu", "npu"),\n' in parity) is npu
    assert (model_dir / f"{model}_npu_patch_gen_config.py").exists() is npu
    _assert_ruff_clean(repo, model_dir)


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


@pytest.mark.parametrize(
    ("category", "answers"),
    [
        ("dense", {"mlp_residual_dropout": True, "logit_softcapping": True}),
        ("moe", {"config_class": "AModelNameLongEnoughToSplitEveryCallAndImportForConditionalGenerationConfig"}),
    ],
)
def test_long_names_are_split_as_ruff_formats_them(repo: Path, category: str, answers: dict) -> None:
    model = "a_model_name_long_enough_to_split_every_call_and_import"
    prefix = "AModelNameLongEnoughToSplitEveryCallAndImport"
    model_dir = copy_model(repo, model, generate=False, prefix=prefix, category=category, npu=True, **answers)

    assert "import (\n    config as gpu_config,\n)" in (model_dir / f"{model}_npu_patch_gen_config.py").read_text()
    assert "    modeling={\n        " in (model_dir / "__init__.py").read_text(encoding="utf-8")
    config = (model_dir / f"{model}_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    if category == "moe":
        assert 'slot-backed losses "\n    "and an expert-parallel plan",\n' in config
        assert f'register_converter(\n    "{model}",\n' in (model_dir / "__init__.py").read_text(encoding="utf-8")
        converter = (model_dir / "checkpoint.py").read_text(encoding="utf-8")
        assert f"def checkpoint_converter(\n    config: {answers['config_class']},\n)" in converter
        parity = (model_dir / "tests" / f"test_{model}_parity.py").read_text(encoding="utf-8")
        assert f'    assert kinds == [\n        "{prefix}SparseMoeBlock",\n' in parity
        assert (
            "    model = build_model(\n        A_MODEL_NAME_LONG_ENOUGH_TO_SPLIT_EVERY_CALL_AND_IMPORT.config(),\n"
            in parity
        )
    else:
        assert "dense_text(\n    config,\n" in config
    _assert_ruff_clean(repo, model_dir)


@pytest.mark.parametrize("category", CATEGORIES_NOT_YET)
def test_categories_without_a_scaffold_are_refused(repo: Path, category: str) -> None:
    with pytest.raises(
        ValueError,
        match=r"Invalid choice for 'category': not yet: .* models have no scaffold yet, only dense and MoE ones",
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
        ({"category": "moe", "sparse_block": "moe block"}, "must be a class name"),
        ({"category": "moe", "num_experts_attr": "num-experts"}, "must be an attribute name"),
        ({"category": "moe", "hub_checkpoint": "Qwen3-30B-A3B"}, "must be a hub repository id"),
    ],
)
def test_answers_that_would_not_make_valid_python_are_refused(repo: Path, answers: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        copy_model(repo, "mistral", **{"prefix": "Mistral", **answers})
    assert not (repo / "models" / "mistral").exists()
