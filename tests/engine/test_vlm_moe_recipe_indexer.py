"""The vlm_moe recipe on a Qwen-VL-like model whose MoE text decoder selects keys with a DeepSeek sparse attention
indexer (hy_v4_vl): the indexer's forward goes behind ``dsa_indexer`` as in a text MoE copy, and only when named."""

from __future__ import annotations

from modelgraft.generator import PatchConfig
from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.recipes import Experts, Router, VisionTower, vlm_moe

HY_V4_VL = "transformers.models.hy_v4_vl.modeling_hy_v4_vl"


def _snippets(indexer: str | None) -> dict[str, str]:
    """target -> snippet name of each patch the recipe plans on hy_v4_vl."""
    config = PatchConfig(source_module=HY_V4_VL, target_file="patched.py", description="vlm_moe recipe under test")
    vlm_moe(
        config,
        prefix="HYV4VL",
        vision=VisionTower("HYV4VLVisionModel", rope=None, attr="vision_tower"),
        experts=Experts("HYV4VLMoE", activation='"silu"', limit="self.experts.swiglu_limit"),
        router=Router("HYV4VLTopkRouter"),
        norms=[],
        mlps=[],
        aux_loss="",
        indexer=indexer,
    )
    return {patch.target: patch.body.name for patch in config.patches if isinstance(patch.body, SnippetRef)}


def test_a_named_indexer_goes_behind_the_dsa_indexer_slot() -> None:
    assert _snippets("HYV4VLIndexer")["HYV4VLIndexer.forward"] == "dsa_indexer_guard"


def test_without_an_indexer_no_dsa_indexer_guard_is_planned() -> None:
    assert "dsa_indexer_guard" not in set(_snippets(None).values())
