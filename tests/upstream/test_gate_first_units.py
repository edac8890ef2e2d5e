"""Gate-first experts whose gated unit is a method: read exactly, fitted to the moe_experts slot's clamp options.

DeepSeek-V4 and the VLM + MoE models after it keep ``gate_up_proj [E, 2I, H]`` applied through ``F.linear``
and hand the packed output to ``self._apply_gate``, so that upstream's grouped backends apply the same unit.
Three units are the slot's: ``ACT(gate.clamp(max=l)) * up.clamp(-l, l)`` (``limit``), gpt_oss's unit on
halves instead of alternate columns (``limit`` and ``alpha``), and Step-3.7's clamp of the activated gate
where the layer has a limit (``limit`` and ``activation_first``). Any other unit (the activated gate clamped
whether or not there is a limit) is not one of them and leaves the experts unguarded with the reason. The toy
modules below are written here; the last tests read the pinned transformers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from modelgraft.generator.recipes.fit import fit_model
from modelgraft.generator.recipes.render import recipe_call
from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.read_moe import read_moe
from modelgraft.generator.upstream.source import ModelSource
from modelgraft.generator.upstream.structure import ExpertsInfo

from .readings import read_model

#: Toy modules and the pinned transformers together, as tests/upstream/test_gpt_oss_experts.py does.
pytestmark = pytest.mark.upstream_facts

_LOOP = """
    def forward(self, hidden_states, top_k_index, top_k_weights):
        final = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = F.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(mask[expert_idx])
            current = self._apply_gate(F.linear(hidden_states[token_idx], self.gate_up_proj[expert_idx]))
            current = F.linear(current, self.down_proj[expert_idx]) * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, current.to(final.dtype))
        return final
"""

_ACT_OF_CLAMPED = """
    def _apply_gate(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        gate = gate.clamp(max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        return self.act_fn(gate) * up
"""

_SILU_OF_CLAMPED = """
    def _apply_gate(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        return F.silu(gate) * up
"""

_GPT_OSS_UNIT_ON_HALVES = """
    def _apply_gate(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        gate = gate.clamp(max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        glu = gate * torch.sigmoid(gate * self.alpha)
        return (up + 1.0) * glu
"""

_CLAMP_AFTER_ACT = """
    def _apply_gate(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        gate = self.act_fn(gate)
        gate = gate.clamp(max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        return gate * up
"""


_ACTIVATION_FIRST = """
    def _apply_gate(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        gate = self.act_fn(gate)
        if self.limit is not None:
            gate = gate.clamp(max=self.limit)
            up = up.clamp(min=-self.limit, max=self.limit)
        return gate * up
"""


def _read(tmp_path: Path, unit: str, *, limit: str = "config.swiglu_limit") -> ExpertsInfo:
    text = f"""import torch
import torch.nn.functional as F
from torch import nn


@use_experts_implementation
class ToyExperts(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.num_local_experts
        self.gate_up_proj = nn.Parameter(torch.empty(self.num_experts, 2 * config.moe_intermediate_size, config.hidden_size))
        self.down_proj = nn.Parameter(torch.empty(self.num_experts, config.hidden_size, config.moe_intermediate_size))
        self.act_fn = ACT2FN[config.hidden_act]
        self.limit = {limit}
        self.alpha = 1.5
{_LOOP}
{unit}


class ToySparseMoeBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.experts = ToyExperts(config)
"""
    module = tmp_path / "modeling_toy.py"
    module.write_text(text, encoding="utf-8")
    source = ModelSource(model="toy", index=ModuleIndex.parse("toy.modeling_toy", module), sources=UpstreamSources())
    experts = read_moe(source, None, {"swiglu_limit": "7.0"}).experts
    assert experts is not None
    return experts


def test_act_of_the_clamped_gate_is_the_limit_unit_with_the_experts_activation(tmp_path: Path) -> None:
    experts = _read(tmp_path, _ACT_OF_CLAMPED)
    assert (experts.layout, experts.gated_unit) == ("gate_up", "clamped")
    assert experts.activation_expr == "self.experts.config.hidden_act"


def test_the_limit_is_the_attribute_the_unit_reads_with_its_config_default(tmp_path: Path) -> None:
    experts = _read(tmp_path, _ACT_OF_CLAMPED)
    assert (experts.limit_attr, experts.limit, experts.limit_config) == ("limit", 7.0, "swiglu_limit")


def test_a_literal_silu_and_a_clamp_spelt_with_min_none_are_the_same_unit(tmp_path: Path) -> None:
    experts = _read(tmp_path, _SILU_OF_CLAMPED)
    assert (experts.gated_unit, experts.activation_expr) == ("clamped", '"silu"')


def test_gpt_oss_unit_on_halves_is_the_clamped_swiglu_with_its_alpha(tmp_path: Path) -> None:
    experts = _read(tmp_path, _GPT_OSS_UNIT_ON_HALVES)
    assert (experts.layout, experts.gated_unit, experts.transposed) == ("gate_up", "clamped_swiglu", False)
    assert (experts.alpha_attr, experts.alpha, experts.alpha_config) == ("alpha", 1.5, "")


def test_an_activation_before_the_clamp_is_not_a_slot_unit(tmp_path: Path) -> None:
    experts = _read(tmp_path, _CLAMP_AFTER_ACT)
    assert (experts.layout, experts.gated_unit) == ("unknown", "")
    assert "canonical loop" in experts.reason


def test_a_clamp_of_the_activated_gate_where_a_limit_exists_is_the_activation_first_unit(tmp_path: Path) -> None:
    experts = _read(tmp_path, _ACTIVATION_FIRST, limit="config.swiglu_limits[0] if config.swiglu_limits else None")
    assert (experts.layout, experts.gated_unit, experts.limit_attr) == ("gate_up", "activation_first", "limit")
    assert experts.activation_expr == "self.experts.config.hidden_act"


def test_a_limit_computed_from_the_config_is_not_read(tmp_path: Path) -> None:
    experts = _read(tmp_path, _ACT_OF_CLAMPED, limit="max(config.swiglu_limit, 1.0)")
    assert experts.gated_unit == ""


def test_the_pinned_deepseek_v4_experts_are_the_limit_unit() -> None:
    experts = read_model("deepseek_v4").moe.experts
    assert (experts.gated_unit, experts.limit_attr, experts.activation_expr) == (
        "clamped",
        "limit",
        "self.experts.config.hidden_act",
    )


def test_fit_guards_the_pinned_minimax_m3_vl_experts_with_limit_and_alpha() -> None:
    fit = fit_model(read_model("minimax_m3_vl"), "vlm_moe")
    assert "moe_experts" in fit.guarded
    experts = fit.arguments["experts"]
    assert (experts["limit"], experts["alpha"], experts["activation"]) == (
        "self.experts.swiglu_limit",
        "self.experts.swiglu_alpha",
        '"silu"',
    )
    assert "layout" not in experts and "interleaved" not in experts


def test_fit_of_the_activation_first_unit_passes_the_option_to_the_slot(tmp_path: Path) -> None:
    experts = _read(tmp_path, _ACTIVATION_FIRST)
    structure = read_model("qwen3_moe")
    fitted = fit_model(replace(structure, moe=replace(structure.moe, experts=experts))).arguments["experts"]
    assert (fitted["limit"], fitted["activation_first"], fitted["activation"]) == (
        "self.experts.limit",
        True,
        "self.experts.config.hidden_act",
    )


def test_the_rendered_recipe_names_the_activation_first_option(tmp_path: Path) -> None:
    experts = _read(tmp_path, _ACTIVATION_FIRST)
    structure = read_model("qwen3_moe")
    arguments = fit_model(replace(structure, moe=replace(structure.moe, experts=experts))).arguments
    _, call = recipe_call("moe", "Qwen3Moe", arguments)
    assert '        limit="self.experts.limit",\n        activation_first=True,\n' in call
