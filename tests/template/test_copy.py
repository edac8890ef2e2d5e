"""``copier copy --trust . models/<m>``: the scaffold reads upstream, and either passes its own tests or is refused.

Models outside the zoo with different structures are copied in a real repository (a fresh clone without
tags), generated and tested, each the first of its kind that the zoo lacks (repos.py's ``outside_zoo``: a model
a user scaffolds into this repository hands its place to the next). Dense: a llama-like model with both
backends, a model whose MLP is not gated (its activation goes behind the activation slot), an old decoder with
nn.LayerNorm and ACT2FN calls in its blocks. MoE: a gated shared expert (which the old recipe dropped, giving
wrong logits), mixtral's hub layout, deepseek's group-limited router and shared experts. The refusals are checked
for each kind: out of category, an Omni model that is not Qwen-Omni-like, a loss head no snippet fits, too little
to guard, a model transformers lacks; none of them writes anything, whether or not the zoo holds the model.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from modelgraft.generator.upstream.reader import read_model
from modelgraft.scaffold.jinja_extension import scaffold_fit

from .repos import copy_and_generate, copy_model, outside_zoo, recorded_answers, ruff, run, writes_nothing


def _assert_ruff_clean(repo: Path, model_dir: Path) -> None:
    relative = str(model_dir.relative_to(repo))
    for args in (("check", relative), ("format", "--check", relative)):
        result = ruff(repo, *args)
        assert result.returncode == 0, f"ruff {' '.join(args)}:\n{result.stdout}{result.stderr}"


def _assert_tests_pass(repo: Path, model: str) -> str:
    tests = run(repo, "-m", "pytest", f"models/{model}", "-q", "-p", "no:cacheprovider", "-rs")
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert "failed" not in tests.stdout
    return tests.stdout


def _refusal(repo: Path, model: str, **answers: object) -> str:
    with writes_nothing(repo, model), pytest.raises(ValueError) as refused:
        copy_model(repo, model, generate=False, record=False, **answers)
    return str(refused.value)


def test_a_dense_scaffold_generates_one_file_for_every_backend_and_passes_its_parity_tests(repo: Path) -> None:
    """Copied and generated as the template's first task does; the smoke check a real copy runs next is a subset
    of the tests below (a copy with every task: test_copy_vision.py, and scaffold-survey's end-to-end test)."""
    model = outside_zoo("dense")
    model_dir = copy_and_generate(repo, model)

    written = (p for p in model_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert sorted(p.relative_to(model_dir).as_posix() for p in written) == sorted(
        [
            ".copier-answers.yml",
            "__init__.py",
            f"generated/patched_modeling_{model}_gpu.diff",
            f"generated/patched_modeling_{model}_gpu.py",
            f"{model}_gpu_patch_gen_config.py",
            f"tests/test_{model}_parity.py",
        ]
    )
    check = run(repo, "-m", "modelgraft.generator", f"models.{model}.{model}_gpu_patch_gen_config", "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    _assert_ruff_clean(repo, model_dir)
    output = _assert_tests_pass(repo, model)
    assert "SKIPPED" not in output


def test_the_answers_read_from_upstream_are_recorded(clean_clone: Path) -> None:
    """Recorded as the reader reads them (the prefix is the classes' own, never the package name's: SmolLM3 for
    smollm3, tests/upstream/test_reader.py)."""
    repo = clean_clone
    model = outside_zoo("dense")
    upstream = read_model(model)
    model_dir = copy_model(repo, model, generate=False)
    answers = recorded_answers(model_dir)
    assert answers["prefix"] == upstream.prefix
    assert answers["category"] == "dense"
    assert answers["config_class"] == upstream.config_class == f"{upstream.prefix}Config"
    assert [norm["cls"] for norm in answers["recipe"]["norms"]] == [f"{upstream.prefix}RMSNorm"]
    assert answers["recipe"]["causal_lm"]["cls"] == f"{upstream.prefix}ForCausalLM"


def test_a_plain_mlp_goes_behind_the_activation_slot_and_the_scaffold_passes(repo: Path) -> None:
    """starcoder2 first: a LayerNorm model (nn.LayerNorm, nothing to guard) whose MLP is c_fc -> act -> c_proj."""
    model = outside_zoo("dense_plain_mlp")
    (mlp,) = [mlp for mlp in read_model(model).mlps if mlp.kind == "plain"]
    model_dir = copy_and_generate(repo, model)
    config = (model_dir / f"{model}_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    # On one line or one argument a line, as ruff lays the call out for the class name's length.
    part = f'Mlp("{mlp.cls}",kind="plain",act="{mlp.act_attr}",activation="self.activation_name"'
    assert part in re.sub(r"\s+", "", config)
    generated = (model_dir / "generated" / f"patched_modeling_{model}_gpu.py").read_text(encoding="utf-8")
    assert "activation_slot(" in generated and "glu_activation_slot" not in generated
    assert f"self.activation_name = config.{mlp.activation_config_attr}" in generated
    _assert_tests_pass(repo, model)


def test_a_moe_scaffold_keeps_the_gated_shared_expert_and_passes(repo: Path) -> None:
    model = outside_zoo("moe_gated_shared_expert")
    model_dir = copy_and_generate(repo, model)
    answers = yaml.safe_load((model_dir / ".copier-answers.yml").read_text(encoding="utf-8"))
    assert answers["category"] == "moe"
    generated = (model_dir / "generated" / f"patched_modeling_{model}_gpu.py").read_text(encoding="utf-8")
    assert "shared_expert_gate" in generated and "moe_experts_slot(" in generated
    assert (model_dir / "checkpoint.py").is_file()
    _assert_tests_pass(repo, model)


def test_an_old_decoder_gets_its_layer_norm_and_activation_calls_guarded_and_passes(repo: Path) -> None:
    """gpt2 first: learned positions, nn.LayerNorm modules and an ACT2FN activation, no norm class of its own, and a
    causal LM named otherwise than *ForCausalLM (GPT2LMHeadModel), whose loss goes behind the slot all the same."""
    model = outside_zoo("dense_layer_norm_calls")
    model_dir = copy_and_generate(repo, model)
    generated = (model_dir / "generated" / f"patched_modeling_{model}_gpu.py").read_text(encoding="utf-8")
    assert "layer_norm_slot(" in generated and "activation_slot(" in generated
    config = (model_dir / f"{model}_gpu_patch_gen_config.py").read_text(encoding="utf-8")
    assert f'LossHead("{read_model(model).causal_lm.cls}"' in config
    _assert_tests_pass(repo, model)


def test_a_mixtral_style_moe_scaffold_uses_its_hub_projection_names_and_passes(repo: Path) -> None:
    """mixtral first: num_local_experts, hub checkpoints with w1/w3/w2 experts, no dense layers."""
    model = outside_zoo("moe_hub_projection_names")
    moe = read_model(model).moe
    gate, up, down = moe.hub_projections
    assert (gate, up, down) != ("gate_proj", "up_proj", "down_proj")
    model_dir = copy_and_generate(repo, model)
    checkpoint = (model_dir / "checkpoint.py").read_text(encoding="utf-8")
    assert f'gate="{gate}"' in checkpoint and f'up="{up}"' in checkpoint and f'down="{down}"' in checkpoint
    assert f"config.{moe.num_experts_attr}" in checkpoint
    _assert_tests_pass(repo, model)


def test_a_deepseek_style_moe_scaffold_guards_its_router_and_shared_experts_and_passes(repo: Path) -> None:
    """glm4_moe first (deepseek_v3 is in the zoo): sigmoid group-limited router with a correction bias, shared
    experts, dense first layers."""
    model = outside_zoo("moe_group_limited_router")
    model_dir = copy_and_generate(repo, model)
    generated = (model_dir / "generated" / f"patched_modeling_{model}_gpu.py").read_text(encoding="utf-8")
    assert "e_score_correction_bias" in generated and "shared_experts" in generated
    for slot in ("moe_experts_slot(", "group_limited_router_slot(", "gated_mlp_slot("):
        assert slot in generated, slot
    _assert_tests_pass(repo, model)


def test_a_scaffold_guarding_many_slots_is_ruff_clean(clean_clone: Path) -> None:
    """qwen2_moe first, which guards eight slots: its parity test's guarded= tuple is too long for one line."""
    repo = clean_clone
    model = outside_zoo("moe_many_slots")
    model_dir = copy_model(repo, model, generate=False)
    assert "    guarded=(\n" in (model_dir / "tests" / f"test_{model}_parity.py").read_text(encoding="utf-8")
    _assert_ruff_clean(repo, model_dir)


def test_a_loss_head_no_snippet_fits_is_refused(clean_clone: Path) -> None:
    repo = clean_clone
    """cpmant computes its loss without self.loss_function: the loss head, which every scaffold guards."""
    message = _refusal(repo, "cpmant")
    assert "causal_lm: CpmAntForCausalLM (line " in message and "loss_function" in message


def test_an_out_of_category_model_is_refused_before_anything_is_written(clean_clone: Path) -> None:
    repo = clean_clone
    message = _refusal(repo, "mamba")
    assert "out of category" in message and "MambaMixer" in message


def test_an_omni_model_that_is_not_qwen_omni_like_is_refused(clean_clone: Path) -> None:
    repo = clean_clone
    message = _refusal(repo, "gemma3n")  # an Omni model outside the zoo (Qwen-Omni's two are in it)
    assert "not Qwen-Omni-like: no class holds a thinker (self.thinker)" in message


def test_too_little_to_guard_is_refused_naming_each_structure_and_its_line(clean_clone: Path) -> None:
    repo = clean_clone
    """bloom: alibi positions and an MLP whose forward takes the residual leave only its norms and loss head."""
    message = _refusal(repo, "bloom")
    assert "fewer than the loss head and two slots" in message
    assert "BloomMLP (line " in message and "residual" in message
    assert "docs/adding-a-model.md" in message


def test_a_model_transformers_lacks_is_refused(clean_clone: Path) -> None:
    repo = clean_clone
    message = _refusal(repo, "not_a_model")
    assert "transformers has no model package not_a_model" in message


def test_a_copy_whose_smoke_check_fails_removes_the_new_directory(repo: Path) -> None:
    """A wrong answer (gemma's norm formulation for mistral, whose norm scales by its weight) generates, but the
    smoke check catches it."""
    model = outside_zoo("dense")
    fitted = scaffold_fit(model)["arguments"]
    assert fitted["norms"] and all(norm["formulation"] != "rms_one_plus_weight" for norm in fitted["norms"])
    wrong = {
        "norms": [{**norm, "formulation": "rms_one_plus_weight"} for norm in fitted["norms"]],
        "mlps": [],
        "rope": fitted["rope"],
        "causal_lm": fitted["causal_lm"],
        "sequence_classification": None,
    }
    with pytest.raises(Exception, match="modelgraft.scaffold.smoke"):
        copy_model(repo, model, record=False, recipe=wrong)
    assert not (repo / "models" / model).exists()


def test_model_must_name_the_destination_folder(clean_clone: Path) -> None:
    repo = clean_clone
    model = outside_zoo("dense")
    with writes_nothing(repo, model), pytest.raises(ValueError, match="the destination folder is"):
        copy_model(repo, model, generate=False, record=False, model="llama")
