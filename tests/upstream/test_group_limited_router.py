"""The sigmoid, group-limited router and the shared-experts MLP, read from upstream, fitted and rendered.

The router slot recomputes one formula, so the fit plans its guard only for routers the reader matched to
that exact shape, with the attributes the match bound; every upstream MoE model with such a router gets it.
A MoE block's shared experts, a gated MLP of plain linears, go behind gated_mlp as a whole instead of only
their activation behind glu_activation, never both.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from modelgraft.generator.recipes.fit import fit_model
from modelgraft.generator.recipes.render import recipe_call
from modelgraft.generator.upstream.index import UpstreamSources

from .readings import read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts

#: The attribute each argument of the slot is read from, in DeepSeek-V3's router.
DEEPSEEK_V3_ROUTER = {
    "weight": "weight",
    "top_k": "top_k",
    "n_group": "num_group",
    "topk_group": "topk_group",
    "norm_topk_prob": "norm_topk_prob",
    "routed_scaling_factor": "routed_scaling_factor",
}


def _models_mentioning(word: str) -> list[str]:
    """Upstream model packages whose modeling source contains ``word`` (found without the reader)."""
    root = Path(importlib.util.find_spec("transformers").origin).parent / "models"
    found = []
    for folder in sorted(root.iterdir()):
        modeling = folder / f"modeling_{folder.name}.py"
        if modeling.is_file() and word in modeling.read_text(encoding="utf-8"):
            found.append(folder.name)
    return found


def test_reader_names_the_router_attribute_of_each_slot_argument() -> None:
    router = read_model("deepseek_v3").moe.router
    assert (router.cls, router.kind) == ("DeepseekV3TopkRouter", "sigmoid_group_limited")
    assert router.attributes == DEEPSEEK_V3_ROUTER


def test_reader_lists_the_shared_experts_linear_projections() -> None:
    shared = read_model("deepseek_v3").moe.shared_experts
    assert (shared.cls, shared.linear_attrs) == ("DeepseekV3MLP", ("gate_proj", "up_proj", "down_proj"))


def test_every_scaffolded_moe_model_with_the_exact_router_gets_its_guard() -> None:
    sources = UpstreamSources(None)
    planned = []
    for model in _models_mentioning("topk_group"):
        structure = read_model(model, sources=sources)
        router = structure.moe.router if structure.moe else None
        if structure.category != "moe" or router is None or router.kind != "sigmoid_group_limited":
            continue
        fit = fit_model(structure)
        assert fit.arguments.get("router") == {"cls": router.cls, "kind": "group_limited", **DEEPSEEK_V3_ROUTER}, model
        assert "group_limited_router" in fit.guarded, model
        planned.append(model)
    assert {"deepseek_v3", "glm4_moe", "glm_moe_dsa"} <= set(planned)


def test_routers_of_other_shapes_get_no_guard() -> None:
    """DeepSeek-V2's softmax router has expert groups; Laguna's sigmoid router has a bias but no groups;
    Qwen3-MoE's softmax router gets its own slot (tests/upstream/test_softmax_routers.py)."""
    for model in ("deepseek_v2", "laguna", "qwen3_moe"):
        fit = fit_model(read_model(model))
        assert fit.arguments.get("router", {}).get("kind") != "group_limited", model
        assert "group_limited_router" not in fit.guarded, model


def test_a_router_whose_attributes_were_not_all_bound_gets_no_guard() -> None:
    structure = read_model("deepseek_v3")
    router = replace(structure.moe.router, attributes={"weight": "weight"})
    fit = fit_model(replace(structure, moe=replace(structure.moe, router=router)))
    assert "router" not in fit.arguments


def test_shared_experts_go_behind_the_whole_mlp_slot_only() -> None:
    fit = fit_model(read_model("deepseek_v3"))
    (mlp,) = fit.arguments["mlps"]
    assert (mlp["cls"], mlp["whole"]) == ("DeepseekV3MLP", True)
    assert "gated_mlp" in fit.guarded and "glu_activation" not in fit.guarded


def test_an_mlp_that_is_not_a_shared_expert_keeps_the_activation_guard() -> None:
    fit = fit_model(read_model("qwen3_moe"))
    assert not any(mlp.get("whole") for mlp in fit.arguments["mlps"])
    assert "glu_activation" in fit.guarded and "gated_mlp" not in fit.guarded


def test_shared_experts_with_a_projection_that_is_no_linear_keep_the_activation_guard() -> None:
    structure = read_model("deepseek_v3")
    shared = replace(structure.moe.shared_experts, linear_attrs=("gate_proj", "up_proj"))
    fit = fit_model(replace(structure, moe=replace(structure.moe, shared_experts=shared)))
    assert not fit.arguments["mlps"][0].get("whole") and "glu_activation" in fit.guarded


def test_rendered_recipe_declares_the_router_and_the_whole_mlp() -> None:
    imports, call = recipe_call("moe", "DeepseekV3", fit_model(read_model("deepseek_v3")).arguments)
    assert "Router" in imports
    assert 'router=Router("DeepseekV3TopkRouter"),' in call
    assert "whole=True" in call


def test_rendered_router_names_only_the_attributes_that_differ_from_the_defaults() -> None:
    arguments = fit_model(read_model("deepseek_v3")).arguments
    arguments["router"] = {**arguments["router"], "n_group": "n_group"}
    _, call = recipe_call("moe", "DeepseekV3", arguments)
    assert 'router=Router("DeepseekV3TopkRouter", n_group="n_group"),' in call


def test_models_without_the_router_render_no_router_argument() -> None:
    """GraniteMoe's router returns other things in another order, a shape no router slot recomputes."""
    _, call = recipe_call("moe", "GraniteMoe", fit_model(read_model("granitemoe")).arguments)
    assert "router=" not in call
