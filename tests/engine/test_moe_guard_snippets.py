"""group_limited_router_guard and gated_mlp_guard, rendered against real upstream members, and their recipe parts.

Each guard puts its slot call in front of upstream's unchanged body and hands the slot what upstream reads;
each refuses a member it does not fit (a router without the correction bias, a misspelt attribute, an MLP
that does more after its down projection), and the recipe refuses a part it cannot apply.
"""

from __future__ import annotations

import pytest

from modelgraft.generator import PatchConfig
from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.errors import PatchApiError, SnippetError
from modelgraft.generator.recipes import Experts, LossHead, Mlp, Router, moe_text
from modelgraft.generator.snippets import environment, render
from modelgraft.generator.upstream.index import UpstreamSources
from modelgraft.generator.upstream.member import UpstreamMember

DEEPSEEK_V3 = "transformers.models.deepseek_v3.modeling_deepseek_v3"
ROUTER_VARIABLES = {
    "weight": "weight",
    "top_k": "top_k",
    "n_group": "num_group",
    "topk_group": "topk_group",
    "norm_topk_prob": "norm_topk_prob",
    "routed_scaling_factor": "routed_scaling_factor",
}
MLP_VARIABLES = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj", "activation": "self.config.hidden_act"}


def _render(snippet: str, module: str, target: str, **variables: object) -> str:
    index = UpstreamSources(None).get(module)
    cls, method = target.split(".")
    member = UpstreamMember(index, index.method(cls, method), target)
    text, _ = render(SnippetRef(name=snippet, variables=variables), member, environment())
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_router_guard_hands_the_slot_every_routing_setting_before_upstreams_body() -> None:
    text = _render("group_limited_router_guard", DEEPSEEK_V3, "DeepseekV3TopkRouter.forward", **ROUTER_VARIABLES)
    assert (
        "if group_limited_router_slot.use_non_eager_impl: return group_limited_router_slot(hidden_states, "
        "self.weight, self.e_score_correction_bias, top_k=self.top_k, n_group=self.num_group, "
        "topk_group=self.topk_group, norm_topk_prob=self.norm_topk_prob, "
        "routed_scaling_factor=self.routed_scaling_factor) hidden_states = hidden_states.view(-1, self.hidden_dim)"
    ) in _one_line(text)


def test_router_guard_refuses_a_router_without_a_correction_bias() -> None:
    with pytest.raises(SnippetError, match="never reads self.e_score_correction_bias"):
        _render(
            "group_limited_router_guard",
            "transformers.models.qwen3_moe.modeling_qwen3_moe",
            "Qwen3MoeTopKRouter.forward",
            **ROUTER_VARIABLES,
        )


def test_router_guard_refuses_a_misspelt_attribute() -> None:
    variables = {**ROUTER_VARIABLES, "n_group": "n_group"}
    with pytest.raises(SnippetError, match="never reads self.n_group"):
        _render("group_limited_router_guard", DEEPSEEK_V3, "DeepseekV3TopkRouter.forward", **variables)


def test_mlp_guard_hands_the_slot_each_projections_weight_and_bias_before_upstreams_body() -> None:
    text = _render("gated_mlp_guard", DEEPSEEK_V3, "DeepseekV3MLP.forward", **MLP_VARIABLES)
    assert (
        "if gated_mlp_slot.use_non_eager_impl: return gated_mlp_slot(x, self.gate_proj.weight, self.up_proj.weight, "
        "self.down_proj.weight, self.config.hidden_act, gate_bias=self.gate_proj.bias, up_bias=self.up_proj.bias, "
        "down_bias=self.down_proj.bias) down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x)) "
        "return down_proj"
    ) in _one_line(text)
    assert "glu_activation_slot" not in text


def test_mlp_guard_refuses_an_mlp_that_does_more_after_its_down_projection() -> None:
    """seed_oss's MLP ends in a residual dropout, which an early return would skip."""
    with pytest.raises(SnippetError, match="not what the MLP returns; guard this MLP with glu_mlp_guard"):
        _render(
            "gated_mlp_guard", "transformers.models.seed_oss.modeling_seed_oss", "SeedOssMLP.forward", **MLP_VARIABLES
        )


def _config() -> PatchConfig:
    return PatchConfig(DEEPSEEK_V3, "patched_modeling_deepseek_v3_gpu.py")


def _moe_text(config: PatchConfig, **parts: object) -> None:
    arguments = {
        "prefix": "DeepseekV3",
        "rope": None,
        "causal_lm": LossHead(),
        "experts": Experts("DeepseekV3MoE"),
        "aux_loss": "",
        **parts,
    }
    moe_text(config, **arguments)


def test_recipe_applies_one_guard_per_mlp_and_one_to_the_router() -> None:
    config = _config()
    _moe_text(config, mlps=[Mlp(whole=True)], router=Router())
    snippets = {patch.target: patch.body.name for patch in config.patches if isinstance(patch.body, SnippetRef)}
    assert snippets["DeepseekV3MLP.forward"] == "gated_mlp_guard"
    assert snippets["DeepseekV3TopkRouter.forward"] == "group_limited_router_guard"
    assert sum(target == "DeepseekV3MLP.forward" for target in (p.target for p in config.patches)) == 1


def test_recipe_refuses_a_whole_mlp_of_another_kind() -> None:
    with pytest.raises(PatchApiError, match="whole=True needs kind='gated'"):
        _moe_text(_config(), mlps=[Mlp(kind="fused_gate_up", whole=True)])


def test_recipe_refuses_an_unknown_router_kind() -> None:
    with pytest.raises(
        PatchApiError, match="kind must be one of group_limited, softmax_topk, topk_softmax, got 'softmax'"
    ):
        _moe_text(_config(), mlps=[], router=Router(kind="softmax"))


def _parallel_plan(block: str) -> str:
    variables = {"prefix": "Toy", "layers": "model.layers", "block": block, "biases": []}
    text, _ = render(SnippetRef(name="moe_parallel_plan", variables=variables), None, environment())
    return text


def test_the_parallel_plan_reaches_the_experts_through_the_layers_sparse_block() -> None:
    text = _parallel_plan("mlp")
    assert '"model.layers.*.mlp.experts.gate_up_proj": "shard(0)"' in text
    assert '"model.layers.*.mlp.experts.down_proj": "shard(0)"' in text


def test_the_parallel_plan_of_a_layer_holding_its_experts_itself_names_them_on_the_layer() -> None:
    """gemma4's decoder layer is its own sparse block: its experts are ``model.layers.<i>.experts``."""
    text = _parallel_plan("")
    assert '"model.layers.*.experts.gate_up_proj": "shard(0)"' in text
    assert '"model.layers.*.experts.down_proj": "shard(0)"' in text
