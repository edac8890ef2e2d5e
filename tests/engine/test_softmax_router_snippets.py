"""The softmax_topk and topk_softmax router guards, rendered against real upstream routers, and the recipe.

Each guard puts its slot call in front of upstream's unchanged body, handing the slot the attributes upstream
reads, and refuses a router that never reads one of them (the other kind of router, a misspelt name); the
recipe hands each snippet only the Router fields its slot takes. softmax_topk's variants (options that differ
from Qwen3-MoE's body) take the same guard, which passes the slot only the options off their defaults.
"""

from __future__ import annotations

import pytest

from modelgraft.generator import PatchConfig
from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.errors import SnippetError
from modelgraft.generator.recipes import Experts, LossHead, Router, moe_text
from modelgraft.generator.snippets import environment, render
from modelgraft.generator.upstream.index import UpstreamSources
from modelgraft.generator.upstream.member import UpstreamMember

QWEN3_MOE = "transformers.models.qwen3_moe.modeling_qwen3_moe"
GPT_OSS = "transformers.models.gpt_oss.modeling_gpt_oss"
MIXTRAL = "transformers.models.mixtral.modeling_mixtral"
QWEN3_5_MOE = "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe"
SOFTMAX_TOPK = {"weight": "weight", "top_k": "top_k", "norm_topk_prob": "norm_topk_prob"}
TOPK_SOFTMAX = {"weight": "weight", "bias": "bias", "top_k": "top_k"}
#: The snippet variables of the variants, as the recipe hands them: no flag, the options that differ.
MIXTRAL_ROUTER = {
    "weight": "weight",
    "top_k": "top_k",
    "upcast": "float_call",
    "cast_back": False,
    "always_renormalize": True,
}
ALWAYS_RENORMALISED = {"weight": "weight", "top_k": "top_k", "always_renormalize": True}


def _render(snippet: str, module: str, target: str, **variables: object) -> str:
    index = UpstreamSources(None).get(module)
    cls, method = target.split(".")
    member = UpstreamMember(index, index.method(cls, method), target)
    text, _ = render(SnippetRef(name=snippet, variables=variables), member, environment())
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_softmax_topk_guard_goes_in_front_of_upstreams_body() -> None:
    text = _render("softmax_topk_router_guard", QWEN3_MOE, "Qwen3MoeTopKRouter.forward", **SOFTMAX_TOPK)
    assert text.startswith("from modelgraft.models.ops.slots import softmax_topk_router_slot\n")
    assert (
        "def forward(self, hidden_states): if softmax_topk_router_slot.use_non_eager_impl: "
        "return softmax_topk_router_slot(hidden_states, self.weight, top_k=self.top_k, "
        "norm_topk_prob=self.norm_topk_prob) hidden_states = hidden_states.reshape(-1, self.hidden_dim)"
    ) in _one_line(text)
    assert "return router_logits, router_scores, router_indices" in text  # upstream's body, to its end


@pytest.mark.parametrize(
    ("module", "target", "variables", "call"),
    [
        (
            MIXTRAL,
            "MixtralTopKRouter.forward",
            MIXTRAL_ROUTER,
            (
                "softmax_topk_router_slot(hidden_states, self.weight, top_k=self.top_k, norm_topk_prob=True, "
                'upcast="float_call", cast_back=False)'
            ),
        ),
        (
            QWEN3_5_MOE,
            "Qwen3_5MoeTopKRouter.forward",
            ALWAYS_RENORMALISED,
            "softmax_topk_router_slot(hidden_states, self.weight, top_k=self.top_k, norm_topk_prob=True)",
        ),
    ],
    ids=["mixtral", "qwen3_5_moe"],
)
def test_softmax_topk_guard_hands_the_slot_each_variants_options(
    module: str, target: str, variables: dict[str, object], call: str
) -> None:
    """A router that always renormalises is told the literal True; only options off the default are passed."""
    text = _render("softmax_topk_router_guard", module, target, **variables)
    assert text.startswith("from modelgraft.models.ops.slots import softmax_topk_router_slot\n")
    assert f"if softmax_topk_router_slot.use_non_eager_impl: return {call} hidden_states = " in _one_line(text)
    assert "return router_logits, router_scores, router_indices" in text


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({**MIXTRAL_ROUTER, "norm_topk_prob": "norm_topk_prob"}, "always renormalises reads no flag"),
        ({**MIXTRAL_ROUTER, "upcast": "double"}, "upcast must be dtype_arg or float_call"),
    ],
    ids=["flag-and-always", "unknown-upcast"],
)
def test_softmax_topk_guard_refuses_contradictory_options(variables: dict[str, object], message: str) -> None:
    with pytest.raises(SnippetError, match=message):
        _render("softmax_topk_router_guard", MIXTRAL, "MixtralTopKRouter.forward", **variables)


def test_softmax_topk_guard_checks_the_attributes_upstream_reads() -> None:
    """Mixtral's body has no renormalisation flag: telling the guard it has one is a wrong reading."""
    with pytest.raises(SnippetError, match="never reads self.norm_topk_prob"):
        _render(
            "softmax_topk_router_guard",
            MIXTRAL,
            "MixtralTopKRouter.forward",
            weight="weight",
            top_k="top_k",
            norm_topk_prob="norm_topk_prob",
            upcast="float_call",
            cast_back=False,
        )


def test_topk_softmax_guard_goes_in_front_of_upstreams_body() -> None:
    text = _render("topk_softmax_router_guard", GPT_OSS, "GptOssTopKRouter.forward", **TOPK_SOFTMAX)
    assert text.startswith("from modelgraft.models.ops.slots import topk_softmax_router_slot\n")
    assert (
        "def forward(self, hidden_states): if topk_softmax_router_slot.use_non_eager_impl: "
        "return topk_softmax_router_slot(hidden_states, self.weight, self.bias, top_k=self.top_k) "
        "router_logits = F.linear(hidden_states, self.weight, self.bias)"
    ) in _one_line(text)


def test_softmax_topk_guard_refuses_a_router_without_the_renormalisation_flag() -> None:
    with pytest.raises(SnippetError, match="never reads self.norm_topk_prob"):
        _render("softmax_topk_router_guard", GPT_OSS, "GptOssTopKRouter.forward", **SOFTMAX_TOPK)


def test_topk_softmax_guard_refuses_a_router_without_a_bias() -> None:
    with pytest.raises(SnippetError, match="never reads self.bias"):
        _render("topk_softmax_router_guard", QWEN3_MOE, "Qwen3MoeTopKRouter.forward", **TOPK_SOFTMAX)


@pytest.mark.parametrize(
    ("snippet", "module", "target", "variables"),
    [
        ("softmax_topk_router_guard", QWEN3_MOE, "Qwen3MoeTopKRouter.forward", {**SOFTMAX_TOPK, "top_k": "topk"}),
        ("topk_softmax_router_guard", GPT_OSS, "GptOssTopKRouter.forward", {**TOPK_SOFTMAX, "top_k": "topk"}),
    ],
    ids=["softmax_topk", "topk_softmax"],
)
def test_each_guard_refuses_a_misspelt_attribute(snippet: str, module: str, target: str, variables: dict) -> None:
    with pytest.raises(SnippetError, match="never reads self.topk"):
        _render(snippet, module, target, **variables)


@pytest.mark.parametrize(
    ("module", "prefix", "router", "snippet", "variables"),
    [
        (
            QWEN3_MOE,
            "Qwen3Moe",
            Router("Qwen3MoeTopKRouter", kind="softmax_topk"),
            "softmax_topk_router_guard",
            SOFTMAX_TOPK,
        ),
        (
            GPT_OSS,
            "GptOss",
            Router("GptOssTopKRouter", kind="topk_softmax"),
            "topk_softmax_router_guard",
            TOPK_SOFTMAX,
        ),
        (
            MIXTRAL,
            "Mixtral",
            Router(
                "MixtralTopKRouter",
                kind="softmax_topk",
                upcast="float_call",
                cast_back=False,
                always_renormalize=True,
            ),
            "softmax_topk_router_guard",
            MIXTRAL_ROUTER,
        ),
        (
            QWEN3_5_MOE,
            "Qwen3_5Moe",
            Router("Qwen3_5MoeTopKRouter", kind="softmax_topk", always_renormalize=True),
            "softmax_topk_router_guard",
            ALWAYS_RENORMALISED,
        ),
    ],
    ids=["softmax_topk", "topk_softmax", "mixtral", "qwen3_5_moe"],
)
def test_recipe_hands_each_router_snippet_only_its_slots_attributes(
    module: str, prefix: str, router: Router, snippet: str, variables: dict[str, str]
) -> None:
    config = PatchConfig(module, f"patched_{prefix}.py")
    moe_text(
        config, prefix=prefix, norms=[], mlps=[], rope=None, causal_lm=LossHead(), experts=Experts(), router=router
    )
    (patch,) = [p for p in config.patches if p.target == f"{router.cls}.forward"]
    assert isinstance(patch.body, SnippetRef)
    assert (patch.body.name, patch.body.variables) == (snippet, variables)
