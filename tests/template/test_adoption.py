"""The zoo's hand-written models are scaffolds too: `scaffold-update` reaches every model directory.

Each model package under models/ records the answers (``.copier-answers.yml``) that make the template
reproduce it as closely as it can, at the current template version (a commit id, test_versions.py).
In a test repository that version is its first commit (repos.py). Whatever differs from that rendering was
written by hand on purpose (llama's docstring, gemma3's ``composed_vlm`` call, the parity tests'
tiny sizes): for ``copier update`` these are local modifications, kept through every update. These tests
pin the list of such files (a scaffold not listed has none: a fresh ``copier copy`` joins the zoo without an
edit here), check that an update without a template change changes nothing, and that a template change
reaches every scaffold and keeps the modifications (docs/scaffolding.md, "Adopting").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from modelgraft.scaffold.folders import model_scaffolds
from modelgraft.scaffold.jinja_extension import scaffold_refusal
from modelgraft.scaffold.survey.population import zoo_models
from modelgraft.scaffold.update import EXIT_CONFLICT, EXIT_OK, main

from .repos import (
    REPO_ROOT,
    commit_all,
    copy_model,
    git,
    recorded_answers,
    run,
    template_version,
    working_directory,
)

#: The zoo's scaffolds that differ from the template's rendering of their answers, and the files that do; every
#: other scaffold is that rendering (a model copied with ``copier copy`` and left as copied).
LOCAL_MODIFICATIONS = {
    # Each config is the template's rendering of what the reader found upstream; the parity tests keep their
    # hand-chosen tiny sizes (sliding windows on, dropout on, sizes that predate the derived ones).
    "llama": ["tests/test_llama_parity.py"],
    "qwen2": ["tests/test_qwen2_parity.py"],
    "qwen3": ["tests/test_qwen3_parity.py"],
    "seed_oss": ["tests/test_seed_oss_parity.py"],
    "qwen3_moe": ["tests/test_qwen3_moe_parity.py"],
    # The hub stores gpt_oss's experts fused (no per-expert keys): its own converter, and the parity test's
    # checkpoint tests for that layout.
    "gpt_oss": ["checkpoint.py", "tests/test_gpt_oss_parity.py"],
    # DeepSeek's hub layout adds the MTP layer and FP8 scales to the per-expert keys: the shared DeepSeek
    # converter; the parity test's sizes (two shared experts, a non-default routed scale).
    "deepseek_v3": ["checkpoint.py", "tests/test_deepseek_v3_parity.py"],
    # GLM-5's hub layout is DeepSeek's (MTP layer, FP8 scales): the shared DeepSeek converter; the config's
    # DSA indexer guard, which the reader does not plan; the parity test's sizes (expert groups, indexers).
    "glm_moe_dsa": ["checkpoint.py", "glm_moe_dsa_gpu_patch_gen_config.py", "tests/test_glm_moe_dsa_parity.py"],
    # InternViT's RMSNorm, which its layers build only for norm_type="rms_norm": guarded by hand.
    "internvl": ["internvl_gpu_patch_gen_config.py"],
    # The text model and its composed VLM in one module: the docstrings, the composed_vlm call, the second
    # registration, the text head, the test's sliding window and soft-cap.
    "gemma3": ["__init__.py", "gemma3_gpu_patch_gen_config.py", "tests/test_gemma3_parity.py"],
    # The Qwen-VL family, configured by hand before the vlm scaffold: each config's docstring, hand-kept module
    # list and the guards the fit leaves out (qwen2_vl's VisionMlp, recorded through modify_init), and each
    # parity test's hand-chosen tiny sizes over the Qwen-VL processor; Qwen3-VL-MoE's converter for the
    # hub's transposed experts.
    "qwen2_vl": ["qwen2_vl_gpu_patch_gen_config.py", "tests/test_qwen2_vl_parity.py"],
    "qwen2_5_vl": ["qwen2_5_vl_gpu_patch_gen_config.py", "tests/test_qwen2_5_vl_parity.py"],
    "qwen3_vl": ["qwen3_vl_gpu_patch_gen_config.py", "tests/test_qwen3_vl_parity.py"],
    "qwen3_vl_moe": ["checkpoint.py", "qwen3_vl_moe_gpu_patch_gen_config.py", "tests/test_qwen3_vl_moe_parity.py"],
    # Qwen2.5-Omni, configured by hand before the omni scaffold: the config's docstring, its hand-kept module list
    # and speech classes (the vocoder's deprecated aliases named), and the parity test's hand-chosen tiny sizes.
    "qwen2_5_omni": ["qwen2_5_omni_gpu_patch_gen_config.py", "tests/test_qwen2_5_omni_parity.py"],
    # Qwen3-Omni-MoE, configured by hand before the omni_moe scaffold: the config's docstring, hand-kept module list
    # and speech classes; the registration as one loop over both model types; the converter's docstring on the
    # hub's per-expert layout, declared (``layout="fused"``); the parity test's hand-chosen tiny sizes.
    "qwen3_omni_moe": [
        "__init__.py",
        "checkpoint.py",
        "qwen3_omni_moe_gpu_patch_gen_config.py",
        "tests/test_qwen3_omni_moe_parity.py",
    ],
}

#: Zoo models the scaffold refuses, written by hand (docs/adding-a-model.md, "Hand-written patches"), each with
#: the part of the refusal that keeps it out; once the scaffold accepts one, it must be adopted.
REFUSED_BY_THE_SCAFFOLD = {
    "deepseek_v4": "defines its own cache",
    "qwen3_5": "a Gated DeltaNet text decoder: the vlm recipe has no mixer guards",
    "qwen3_5_moe": "a Gated DeltaNet text decoder: the vlm recipe has no mixer guards",
    # Vision encoders of composed VLMs (docs/vision-encoders.md): no causal LM, a config of the vision_encoder recipe.
    "clip": "out of category: no causal LM",
    # Not a transformers package name: the encoder lives in idefics3's module, the Idefics3 VLM stays in the survey.
    "idefics3_vision": "transformers has no model package",
    "pixtral": "out of category: no causal LM",
    "siglip": "out of category: no causal LM",
}

#: A template change that reaches every model and that no hand-written part can conflict with: a new file.
NEW_TEMPLATE_FILE, NEW_FILE = "template/TEMPLATE_NOTE.md.jinja", "TEMPLATE_NOTE.md"


def _scaffolds(repo: Path) -> list[str]:
    """The model packages of ``repo`` that are scaffolds, as ``scaffold-update`` finds them."""
    return [model_dir.name for model_dir in model_scaffolds(repo)]


def _modified(repo: Path, model: str) -> list[str]:
    """Files of models/<model> that differ from HEAD, or are new, relative to the model folder."""
    status = git(repo, "status", "--porcelain", "--untracked-files=all", f"models/{model}").splitlines()
    return sorted(line[3:].removeprefix(f"models/{model}/") for line in status)


def _update(repo: Path, *args: str) -> int:
    with working_directory(repo):
        return main(list(args))


def test_every_model_of_the_zoo_is_a_scaffold() -> None:
    """A model package (a folder of models/ with a patch config) without answers would miss every update."""
    scaffolds = sorted(zoo_models(REPO_ROOT) - set(REFUSED_BY_THE_SCAFFOLD))
    assert scaffolds == _scaffolds(REPO_ROOT), "a model package without answers? adopt it (docs/scaffolding.md)"
    assert set(LOCAL_MODIFICATIONS) <= set(scaffolds), "LOCAL_MODIFICATIONS names a model the zoo lacks"
    for model in scaffolds:
        answers = yaml.safe_load((REPO_ROOT / "models" / model / ".copier-answers.yml").read_text(encoding="utf-8"))
        # A copy from the repository root, recording the full id of a commit, which every clone can check out
        # (which commit: test_versions.py).
        assert answers["_src_path"] == ".", model
        assert re.fullmatch(r"[0-9a-f]{40}", str(answers["_commit"])), (model, answers["_commit"])
        assert answers["model"] == model


@pytest.mark.parametrize("model", sorted(REFUSED_BY_THE_SCAFFOLD))
def test_a_zoo_model_without_answers_is_one_the_scaffold_refuses(model: str) -> None:
    assert (REPO_ROOT / "models" / model).is_dir()
    assert not (REPO_ROOT / "models" / model / ".copier-answers.yml").exists()
    assert REFUSED_BY_THE_SCAFFOLD[model] in scaffold_refusal(model)


@pytest.mark.parametrize("model", _scaffolds(REPO_ROOT))
def test_recorded_answers_render_the_zoo_but_its_local_modifications(clean_clone: Path, model: str) -> None:
    """Rendered over the zoo's own package from its answers, only the files written by hand on purpose change."""
    repo = clean_clone
    copy_model(repo, model, generate=False, **recorded_answers(repo / "models" / model))

    # .copier-answers.yml is not among them: the recorded file is what Copier writes for these answers.
    # Another file among them after a template change: the zoo is behind the template (commit, scaffold-update).
    assert _modified(repo, model) == LOCAL_MODIFICATIONS.get(model, []), git(repo, "diff", f"models/{model}")


def test_an_update_without_a_template_change_changes_nothing(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    version = template_version(repo)
    assert _update(repo) == EXIT_OK

    out = capsys.readouterr().out
    for model in _scaffolds(repo):
        assert f"models/{model}: current (template {version[:12]})" in out
    # Byte for byte: nothing modified, nothing new, nothing left unmerged.
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.heavy
def test_a_template_change_reaches_every_model_and_keeps_its_local_modifications(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hand_written = {
        "qwen3": ("tests/test_qwen3_parity.py", '"sliding_window": 3'),
        "seed_oss": ("tests/test_seed_oss_parity.py", '"residual_dropout": 0.3'),
        "gemma3": (
            "gemma3_gpu_patch_gen_config.py",
            'composed_vlm(config, prefix="Gemma3", pretrained_model=None, sequence_parallel=False)',
        ),
    }
    v1 = template_version(repo)
    (repo / NEW_TEMPLATE_FILE).write_text("{{ model }}: a note of the new template version\n", encoding="utf-8")
    commit_all(repo, "template: a new file")  # commit A: the new template version
    v2 = template_version(repo)
    assert v2 != v1
    # The template drift check fails until the scaffolds are updated and committed.
    assert _update(repo, "--check") == EXIT_CONFLICT
    assert "run scaffold-update" in capsys.readouterr().err

    assert _update(repo) == EXIT_OK

    out = capsys.readouterr().out
    for model in _scaffolds(repo):
        model_dir = repo / "models" / model
        assert f"models/{model}: updated (template {v1[:12]} -> {v2[:12]})" in out
        note = (model_dir / NEW_FILE).read_text(encoding="utf-8")
        assert note == f"{model}: a note of the new template version\n", model
        assert yaml.safe_load((model_dir / ".copier-answers.yml").read_text(encoding="utf-8"))["_commit"] == v2
        # The new file came and the recorded version changed; nothing else did.
        assert set(_modified(repo, model)) == {".copier-answers.yml", NEW_FILE}, model
    for model, (path, written) in hand_written.items():
        assert written in (repo / "models" / model / path).read_text(encoding="utf-8"), f"{model}/{path}"
    assert git(repo, "ls-files", "--unmerged") == ""

    # generate-all after the update (as the docs say) writes the modeling as committed, byte for byte.
    generated = run(repo, "-m", "modelgraft.generator", "--all", "--diff")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    for model in _scaffolds(repo):
        assert set(_modified(repo, model)) == {".copier-answers.yml", NEW_FILE}, model
    assert not [line for line in git(repo, "status", "--porcelain").splitlines() if "/generated/" in line]
    commit_all(repo, "the zoo at the new template version")  # commit B: leaves the template alone
    assert template_version(repo) == v2
    assert _update(repo, "--check") == EXIT_OK
    assert _update(repo) == EXIT_OK
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
