"""Reusing a sibling config's patches (``name_map``): qwen3_5_moe takes Qwen3.5's Gated DeltaNet patches as they are.

Where the classes are structural duplicates (the mixer's gated norm and its four functions) the bodies are shared;
where the output dataclasses differ (Qwen3.5-MoE's carry router logits) the dataclass check rejects the reuse, as
it must: the renamed body would build the MoE dataclass without its MoE fields. On the pinned transformers files.
"""

from __future__ import annotations

import ast

from modelgraft.generator.codegen.tokens import rename_identifiers
from modelgraft.generator.discovery import find_settings, load_config
from modelgraft.generator.recipes.hybrid import GatedDeltaNet, gated_delta_net_targets
from modelgraft.generator.upstream.index import UpstreamSources

from .projects import REPO_ROOT, Project, config_source

QWEN3_5 = "transformers.models.qwen3_5.modeling_qwen3_5"
QWEN3_5_MOE = "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe"
NAME_MAP = {"Qwen3_5": "Qwen3_5Moe"}

#: A Qwen3.5 text-model forward that builds the output dataclass upstream's Qwen3.5 text model builds (the shared
#: BaseModelOutputWithPast: last_hidden_state, cache), where Qwen3.5-MoE's builds MoeModelOutputWithPast.
TEXT_MODEL_FORWARD = """
@config.override_method("Qwen3_5TextModel.forward")
def text_model_forward(
    self, input_ids=None, attention_mask=None, position_ids=None, cache=None, inputs_embeds=None,
    use_cache=None, **kwargs,
):
    hidden_states = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
    return BaseModelOutputWithPast(last_hidden_state=self.norm(hidden_states), cache=cache)
"""

REUSE = (
    'config.override_method("Qwen3_5MoeTextModel.forward", replacement=text_model_forward, '
    'name_map={"Qwen3_5": "Qwen3_5Moe"})\n'
)


def test_reusing_qwen3_5s_text_model_forward_for_qwen3_5_moe_is_rejected_for_the_router_logits_it_drops(
    project: Project,
) -> None:
    project.config("qwen3_5", config_source(TEXT_MODEL_FORWARD, source_module=QWEN3_5, target="a_qwen3_5.py"))
    project.config(
        "qwen3_5_moe",
        config_source(
            REUSE,
            source_module=QWEN3_5_MOE,
            target="a_qwen3_5_moe.py",
            header="from ..qwen3_5.qwen3_5_gpu_patch_gen_config import text_model_forward\n",
        ),
    )
    before = project.snapshot()

    result = project.run(project.module("qwen3_5_moe"))

    assert result.code == 2, result.err
    assert "target Qwen3_5MoeTextModel.forward" in result.err
    assert (
        "reused body (name_map) constructs BaseModelOutputWithPast where upstream's Qwen3_5MoeTextModel.forward "
        "constructs MoeModelOutputWithPast: fields the reused body never sets: router_logits" in result.err
    )
    assert project.snapshot() == before


def test_a_sibling_config_imported_relatively_does_not_run_its_model_packages_init(project: Project) -> None:
    """A zoo package's __init__ registers the model at run time; generation must not execute it."""
    project.config("qwen3_5", config_source(TEXT_MODEL_FORWARD, source_module=QWEN3_5, target="a_qwen3_5.py"))
    project.write("zoo/qwen3_5/__init__.py", 'raise RuntimeError("a model package ran at generation time")\n')
    project.config(
        "qwen3_5_moe",
        config_source(
            "",
            source_module=QWEN3_5_MOE,
            target="a_qwen3_5_moe.py",
            header="from ..qwen3_5.qwen3_5_gpu_patch_gen_config import config as qwen3_5_config\n",
        ),
    )

    result = project.run(project.module("qwen3_5_moe"), "--dry-run")

    assert result.code == 0, result.err


def _dumped(module: str, member: str, name_map: dict[str, str] | None = None) -> str:
    """``member`` of the upstream ``module``, identifiers renamed by ``name_map``, as ``ast.dump`` spells it."""
    index = UpstreamSources(None).get(module)
    text = ast.get_source_segment(index.source, index.members[member]) or ""
    return ast.dump(ast.parse(rename_identifiers(text, name_map or {})))


def test_qwen3_5_moe_takes_qwen3_5s_mixer_patch_bodies_for_members_that_are_structural_duplicates() -> None:
    settings = find_settings(REPO_ROOT)
    dense = load_config("models.qwen3_5.qwen3_5_gpu_patch_gen_config", settings).config
    moe = load_config("models.qwen3_5_moe.qwen3_5_moe_gpu_patch_gen_config", settings).config
    dense_patches = {patch.target: patch for patch in dense.patches}
    moe_patches = {patch.target: patch for patch in moe.patches}
    for target in gated_delta_net_targets(GatedDeltaNet(), prefix="Qwen3_5"):
        member, renamed = target.split(".")[0], rename_identifiers(target, NAME_MAP)
        assert _dumped(QWEN3_5_MOE, rename_identifiers(member, NAME_MAP)) == _dumped(QWEN3_5, member, NAME_MAP)
        assert moe_patches[renamed].body is dense_patches[target].body, target
        assert dict(moe_patches[renamed].name_map) == NAME_MAP, target
