"""Transposed gate-first experts (Aria's): read exactly, fitted to the moe_experts slot's ``transposed`` layout.

Aria keeps ``gate_up_proj [E, H, 2I]`` and ``down_proj [E, I, H]`` applied as ``x @ W[e]``, splits the packed
output into gate-first halves with ``.chunk(2)``, has no bias, and applies ``ACT(gate) * up`` inline with an
activation ``__init__`` names by a literal (``ACT2FN["silu"]``, whatever the config's ``hidden_act``). The slot's
``transposed`` layout computes that loop; any other shape (a bias, a unit on alternate columns, an activation with
no name the block can reach) leaves the experts unguarded with the reason. The toy modules below are written here;
the last tests read the pinned transformers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from modelgraft.generator.recipes.fit import fit_model
from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.read_moe import read_moe
from modelgraft.generator.upstream.source import ModelSource
from modelgraft.generator.upstream.structure import ExpertsInfo

from .readings import read_model

#: Toy modules and the pinned transformers together, as tests/upstream/test_gate_first_units.py does.
pytestmark = pytest.mark.upstream_facts

_LOOP = """
    def forward(self, hidden_states, top_k_index, top_k_weights):
        final = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1)
            mask = mask.permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(mask[expert_idx])
            current = hidden_states[token_idx]
            gate, up = (current @ self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current = ACTIVATION(gate) * up
            current = current @ self.down_proj[expert_idx]
            current = current * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, current.to(final.dtype))
        return final
"""


def _read(
    tmp_path: Path,
    *,
    act: str = 'ACT2FN["silu"]',
    activation: str = "self.act_fn",
    gate_up: str = "self.num_experts, config.hidden_size, 2 * config.intermediate_size",
    loop: str = _LOOP,
    bias: bool = False,
) -> ExpertsInfo:
    bias_line = "self.gate_up_proj_bias = nn.Parameter(torch.empty(self.num_experts, 2))" if bias else ""
    text = f"""import torch
import torch.nn.functional as F
from torch import nn


@use_experts_implementation(is_transposed=True)
class ToyExperts(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_experts = config.num_local_experts
        self.gate_up_proj = nn.Parameter(torch.empty({gate_up}))
        self.down_proj = nn.Parameter(torch.empty(self.num_experts, config.intermediate_size, config.hidden_size))
        self.act_fn = {act}
        {bias_line}
{loop.replace("ACTIVATION", activation)}


class ToySparseMoeBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.experts = ToyExperts(config)
"""
    module = tmp_path / "modeling_toy.py"
    module.write_text(text, encoding="utf-8")
    source = ModelSource(model="toy", index=ModuleIndex.parse("toy.modeling_toy", module), sources=UpstreamSources())
    experts = read_moe(source, None, {}).experts
    assert experts is not None
    return experts


def _fitted(experts: ExpertsInfo) -> dict | None:
    structure = read_model("qwen3_moe")
    return fit_model(replace(structure, moe=replace(structure.moe, experts=experts))).arguments.get("experts")


def test_a_literal_activation_name_is_read_as_that_name(tmp_path: Path) -> None:
    experts = _read(tmp_path)
    assert (experts.layout, experts.transposed, experts.reason) == ("gate_up_transposed", True, "")
    assert experts.activation_expr == '"silu"'


def test_a_config_activation_is_named_through_the_experts_config(tmp_path: Path) -> None:
    experts = _read(tmp_path, act="ACT2FN[config.hidden_act]")
    assert experts.activation_expr == "self.experts.config.hidden_act"


def test_a_literal_function_in_the_loop_is_its_act2fn_name(tmp_path: Path) -> None:
    experts = _read(tmp_path, activation="F.silu")
    assert (experts.transposed, experts.activation_expr) == (True, '"silu"')


def test_the_one_hot_spelt_from_torch_is_the_same_loop(tmp_path: Path) -> None:
    loop = _LOOP.replace("nn.functional.one_hot", "torch.nn.functional.one_hot")
    assert _read(tmp_path, loop=loop).transposed


def test_an_up_first_split_is_not_the_loop(tmp_path: Path) -> None:
    loop = _LOOP.replace("current = ACTIVATION(gate) * up", "current = ACTIVATION(up) * gate")
    experts = _read(tmp_path, loop=loop)
    assert (experts.layout, experts.transposed) == ("gate_up_transposed", False)
    assert _fitted(experts) is None


def test_a_bias_leaves_the_experts_unguarded(tmp_path: Path) -> None:
    experts = _read(tmp_path, bias=True)
    assert (experts.has_bias, experts.transposed) == (True, False)
    assert _fitted(experts) is None


def test_fit_passes_the_transposed_layout_and_the_literal_activation(tmp_path: Path) -> None:
    fitted = _fitted(_read(tmp_path))
    assert fitted is not None
    assert (fitted["layout"], fitted["activation"]) == ("transposed", '"silu"')
    assert "interleaved" not in fitted and "gate_up_bias" not in fitted


def test_fit_guards_the_pinned_aria_experts_with_the_transposed_layout() -> None:
    fit = fit_model(read_model("aria"), "vlm_moe")
    assert "moe_experts" in fit.guarded
    experts = fit.arguments["experts"]
    assert (experts["sparse_block"], experts["layout"], experts["activation"]) == (
        "AriaTextMoELayer",
        "transposed",
        '"silu"',
    )
