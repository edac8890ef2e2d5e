"""Softmax routers read from upstream, fitted and rendered: each slot only for the one body it recomputes.

softmax_topk_router_slot recomputes Qwen3-MoE's router (fp32 softmax, top-k, renormalised behind a flag,
cast back) and, told by options, its variants (always renormalised; also upcast with .float() and left fp32:
Mixtral); topk_softmax_router_slot gpt_oss's (biased logits, top-k, softmax over the k values in their
dtype). The reader binds the attributes (and options) of exactly those bodies; a router that differs in any
other step (an epsilon, another upcast, a dropped bias) gets no roles, so no guard.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from modelgraft.generator.recipes.fit import fit_model
from modelgraft.generator.recipes.render import recipe_call
from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.read_moe import read_moe
from modelgraft.generator.upstream.source import ModelSource
from modelgraft.generator.upstream.structure import RouterInfo

from .readings import read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts

QWEN3_MOE_ROUTER = {"weight": "weight", "top_k": "top_k", "norm_topk_prob": "norm_topk_prob"}
GPT_OSS_ROUTER = {"weight": "weight", "bias": "bias", "top_k": "top_k"}

#: Upstream routers whose forward is Qwen3-MoE's body exactly (the pinned transformers).
EXACT_SOFTMAX_TOPK = {
    "flex_olmo",
    "mellum",
    "olmoe",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_omni_moe",
    "qwen4_exp",
}
#: Softmax-then-top-k routers of another body, which the slot recomputes with options: always renormalised
#: (qwen3_5_moe, qwen3_vl_moe), or also upcast with .float() and without the cast back, fp32 weights (mixtral,
#: minimax). Each with its bound roles and the reader's options.
ALWAYS_RENORMALISED = {"upcast": "dtype_arg", "cast_back": True, "always_renormalize": True}
FP32_WEIGHTS = {"upcast": "float_call", "cast_back": False, "always_renormalize": True}
VARIANT_ROLES = {"weight": "weight", "top_k": "top_k"}
OTHER_SOFTMAX_TOPK = {
    "minimax": FP32_WEIGHTS,
    "mixtral": FP32_WEIGHTS,
    "qwen3_5_moe": ALWAYS_RENORMALISED,
    "qwen3_vl_moe": ALWAYS_RENORMALISED,
}
#: The options of Qwen3-MoE's own body: the slot's defaults, which the fit leaves out.
QWEN3_MOE_OPTIONS = {"upcast": "dtype_arg", "cast_back": True, "always_renormalize": False}


def _modeling(model: str) -> Path:
    return Path(importlib.util.find_spec("transformers").origin).parent / "models" / model / f"modeling_{model}.py"


def _router_source(model: str, cls: str) -> str:
    text = _modeling(model).read_text(encoding="utf-8")
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == cls)
    return ast.get_source_segment(text, node)


def _read_router(tmp_path: Path, router_source: str, cls: str) -> RouterInfo:
    """The reader's verdict on ``router_source``, the router of a sparse block in an otherwise minimal module."""
    module = tmp_path / "modeling_toy.py"
    module.write_text(
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
        f"{router_source}\n\n\n"
        "class ToyExperts(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n\n\n"
        "class ToySparseMoeBlock(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n"
        f"        self.experts = ToyExperts(config)\n        self.gate = {cls}(config)\n",
        encoding="utf-8",
    )
    source = ModelSource(model="toy", index=ModuleIndex.parse("toy.modeling_toy", module), sources=UpstreamSources())
    router = read_moe(source, None).router
    assert router is not None and router.cls == cls
    return router


def test_reader_binds_qwen3_moe_routers_attributes() -> None:
    router = read_model("qwen3_moe").moe.router
    assert (router.cls, router.kind, router.attributes) == ("Qwen3MoeTopKRouter", "softmax_topk", QWEN3_MOE_ROUTER)


def test_reader_recognises_gpt_oss_router_and_binds_its_attributes() -> None:
    router = read_model("gpt_oss").moe.router
    assert (router.cls, router.kind, router.attributes) == ("GptOssTopKRouter", "topk_softmax", GPT_OSS_ROUTER)


def test_routers_with_qwen3_moes_exact_body_get_the_guard_without_options() -> None:
    sources = UpstreamSources(None)
    for model in sorted(EXACT_SOFTMAX_TOPK):
        structure = read_model(model, sources=sources)
        router = structure.moe.router
        assert (router.kind, router.attributes, router.options) == (
            "softmax_topk",
            QWEN3_MOE_ROUTER,
            QWEN3_MOE_OPTIONS,
        ), model
        # Only MoE text models get a scaffold (qwen3_next is a hybrid, qwen3_omni_moe an omni model).
        planned = fit_model(structure).arguments.get("router") if structure.category == "moe" else "no scaffold"
        assert planned in ("no scaffold", {"cls": router.cls, "kind": "softmax_topk", **QWEN3_MOE_ROUTER}), model


@pytest.mark.parametrize("model", sorted(OTHER_SOFTMAX_TOPK))
def test_reader_recognises_each_softmax_topk_variant_and_its_options(model: str) -> None:
    """No norm_topk_prob role for a router that always renormalises; the options name its body's steps."""
    structure = read_model(model)
    router = structure.moe.router
    assert (router.kind, router.attributes, router.options) == (
        "softmax_topk",
        VARIANT_ROLES,
        OTHER_SOFTMAX_TOPK[model],
    )
    if structure.category == "moe":  # qwen3_5_moe and qwen3_vl_moe are multimodal: no scaffold
        changed = {key: value for key, value in OTHER_SOFTMAX_TOPK[model].items() if QWEN3_MOE_OPTIONS[key] != value}
        planned = fit_model(structure).arguments["router"]
        assert planned == {"cls": router.cls, "kind": "softmax_topk", **VARIANT_ROLES, **changed}


@pytest.mark.parametrize("model", ["granitemoe", "jetmoe", "openai_privacy_filter"])
def test_other_top_k_then_softmax_routers_stay_unknown(model: str) -> None:
    """Granite's returns other things in another order, jetmoe's groups tokens, the privacy filter's upcasts
    and divides by k: none is gpt_oss's body."""
    assert read_model(model).moe.router.kind == "unknown"


#: One-step changes of Qwen3-MoE's router body, each something else than what the slot computes.
SOFTMAX_TOPK_NEAR_MISSES = {
    "softmax in the logits' dtype": (
        "softmax(router_logits, dtype=torch.float, dim=-1)",
        "softmax(router_logits, dim=-1)",
    ),
    "epsilon in the renormalisation": (
        "router_top_value.sum(dim=-1, keepdim=True)",
        "(router_top_value.sum(dim=-1, keepdim=True) + 1e-20)",
    ),
    "no cast back": ("router_top_value = router_top_value.to(router_logits.dtype)", "pass"),
    "a scaled weight": ("F.linear(hidden_states, self.weight)", "F.linear(hidden_states, self.weight * 2)"),
}


@pytest.mark.parametrize("change", sorted(SOFTMAX_TOPK_NEAR_MISSES))
def test_a_near_miss_of_the_softmax_topk_body_gets_no_roles(tmp_path: Path, change: str) -> None:
    old, new = SOFTMAX_TOPK_NEAR_MISSES[change]
    original = _router_source("qwen3_moe", "Qwen3MoeTopKRouter")
    assert _read_router(tmp_path, original, "Qwen3MoeTopKRouter").attributes == QWEN3_MOE_ROUTER
    assert original.count(old) == 1
    router = _read_router(tmp_path, original.replace(old, new), "Qwen3MoeTopKRouter")
    assert router.attributes == {}


#: One-step changes of the variants' bodies (Mixtral's, Qwen3.5-MoE's), none of which the slot's options reach.
VARIANT_NEAR_MISSES = {
    "mixtral upcast to fp64": ("mixtral", "MixtralTopKRouter", "router_logits.float()", "router_logits.double()"),
    "mixtral epsilon in the renormalisation": (
        "mixtral",
        "MixtralTopKRouter",
        "router_top_value.sum(dim=-1, keepdim=True)",
        "(router_top_value.sum(dim=-1, keepdim=True) + 1e-20)",
    ),
    "mixtral softmax over the tokens": (
        "mixtral",
        "MixtralTopKRouter",
        "softmax(router_logits.float(), dim=-1)",
        "softmax(router_logits.float(), dim=0)",
    ),
    "qwen3_5_moe without the cast back": (
        "qwen3_5_moe",
        "Qwen3_5MoeTopKRouter",
        "router_top_value = router_top_value.to(router_logits.dtype)",
        "pass",
    ),
    "qwen3_5_moe scaled weights": (
        "qwen3_5_moe",
        "Qwen3_5MoeTopKRouter",
        "router_scores = router_top_value\n",
        "router_scores = router_top_value * 2\n",
    ),
}


@pytest.mark.parametrize("change", sorted(VARIANT_NEAR_MISSES))
def test_a_near_miss_of_a_variants_body_gets_no_roles_or_options(tmp_path: Path, change: str) -> None:
    model, cls, old, new = VARIANT_NEAR_MISSES[change]
    original = _router_source(model, cls)
    assert _read_router(tmp_path, original, cls).options == OTHER_SOFTMAX_TOPK[model]
    assert original.count(old) == 1
    router = _read_router(tmp_path, original.replace(old, new), cls)
    assert (router.attributes, router.options) == ({}, {})


def test_a_weight_narrower_than_the_reshape_gets_no_roles(tmp_path: Path) -> None:
    """The slot flattens the tokens to the weight's width, upstream to self.hidden_dim: equal only by __init__."""
    original = _router_source("qwen3_moe", "Qwen3MoeTopKRouter")
    old = "torch.zeros(self.num_experts, self.hidden_dim)"
    router = _read_router(
        tmp_path, original.replace(old, "torch.zeros(self.num_experts, 2 * self.hidden_dim)"), "Qwen3MoeTopKRouter"
    )
    assert (router.kind, router.attributes, router.options) == ("softmax_topk", {}, {})


TOPK_SOFTMAX_NEAR_MISSES = {
    "no bias": ("F.linear(hidden_states, self.weight, self.bias)", "F.linear(hidden_states, self.weight)"),
    "an fp32 softmax": ("dtype=router_top_value.dtype", "dtype=torch.float32"),
    "softmax over the tokens": ("dim=1, dtype", "dim=0, dtype"),
    "scaled weights": ("return router_logits, router_scores", "return router_logits, router_scores / self.top_k"),
}


@pytest.mark.parametrize("change", sorted(TOPK_SOFTMAX_NEAR_MISSES))
def test_a_near_miss_of_the_topk_softmax_body_is_unknown(tmp_path: Path, change: str) -> None:
    old, new = TOPK_SOFTMAX_NEAR_MISSES[change]
    original = _router_source("gpt_oss", "GptOssTopKRouter")
    assert _read_router(tmp_path, original, "GptOssTopKRouter").attributes == GPT_OSS_ROUTER
    assert original.count(old) == 1
    router = _read_router(tmp_path, original.replace(old, new), "GptOssTopKRouter")
    assert (router.kind, router.attributes) == ("unknown", {})


@pytest.mark.parametrize(
    ("model", "kind", "roles", "slot"),
    [
        ("qwen3_moe", "softmax_topk", QWEN3_MOE_ROUTER, "softmax_topk_router"),
        ("gpt_oss", "topk_softmax", GPT_OSS_ROUTER, "topk_softmax_router"),
    ],
)
def test_fit_plans_the_router_slot_of_its_kind(model: str, kind: str, roles: dict[str, str], slot: str) -> None:
    structure = read_model(model)
    fit = fit_model(structure)
    assert fit.arguments["router"] == {"cls": structure.moe.router.cls, "kind": kind, **roles}
    assert slot in fit.guarded and "group_limited_router" not in fit.guarded


def test_a_softmax_router_whose_roles_were_not_all_bound_gets_no_guard() -> None:
    structure = read_model("qwen3_moe")
    router = replace(structure.moe.router, attributes={"weight": "weight", "top_k": "top_k"})
    fit = fit_model(replace(structure, moe=replace(structure.moe, router=router)))
    assert "router" not in fit.arguments and "softmax_topk_router" not in fit.guarded


@pytest.mark.parametrize(
    ("model", "prefix", "declaration"),
    [
        ("qwen3_moe", "Qwen3Moe", 'router=Router("Qwen3MoeTopKRouter", kind="softmax_topk"),'),
        ("gpt_oss", "GptOss", 'router=Router("GptOssTopKRouter", kind="topk_softmax"),'),
    ],
)
def test_rendered_recipe_declares_the_router_in_one_line(model: str, prefix: str, declaration: str) -> None:
    imports, call = recipe_call("moe", prefix, fit_model(read_model(model)).arguments)
    assert "Router" in imports
    assert f"    {declaration}" in call.splitlines()


def test_rendered_recipe_spells_out_the_variants_options() -> None:
    """Mixtral's router is declared with every option that differs from Qwen3-MoE's body, and no flag."""
    imports, call = recipe_call("moe", "Mixtral", fit_model(read_model("mixtral")).arguments)
    assert "Router" in imports
    assert (
        'router=Router( "MixtralTopKRouter", kind="softmax_topk", upcast="float_call", cast_back=False, '
        "always_renormalize=True ),"
    ) in " ".join(call.split())
