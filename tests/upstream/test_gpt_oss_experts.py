"""gpt_oss's experts, read from upstream and fitted: every layout option of the moe_experts slot comes from its source.

GptOssExperts stores ``gate_up_proj [E, H, 2I]`` applied as ``x @ W[e]``, interleaved gate/up columns, a
bias after each matmul and a clamped SwiGLU whose limit and alpha are constants of its ``__init__``. The
reader must report each of these from the source, and the fit must pass them all to the guard.
"""

from __future__ import annotations

import ast
from dataclasses import replace

import pytest

from modelgraft.generator.recipes.fit import fit_model
from modelgraft.generator.recipes.render import recipe_call
from modelgraft.generator.upstream.reader import model_file, read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts


def _upstream_constant(attr: str) -> float:
    """The constant GptOssExperts.__init__ assigns to ``self.<attr>``, read independently of the reader."""
    tree = ast.parse(model_file("gpt_oss").read_text(encoding="utf-8"))
    experts = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GptOssExperts")
    for node in ast.walk(experts):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == f"self.{attr}":
            return float(ast.literal_eval(node.value))
    raise AssertionError(f"GptOssExperts sets no self.{attr}")


def test_reader_reports_the_transposed_interleaved_layout() -> None:
    experts = read_model("gpt_oss").moe.experts
    assert (experts.layout, experts.transposed) == ("interleaved", True)


def test_reader_reports_both_bias_attributes() -> None:
    experts = read_model("gpt_oss").moe.experts
    assert (experts.has_bias, experts.gate_up_bias, experts.down_bias) == (True, "gate_up_proj_bias", "down_proj_bias")


def test_reader_reports_the_clamped_swiglu_with_upstreams_constants() -> None:
    experts = read_model("gpt_oss").moe.experts
    assert experts.gated_unit == "clamped_swiglu"
    assert (experts.limit_attr, experts.limit) == ("limit", _upstream_constant("limit"))
    assert (experts.alpha_attr, experts.alpha) == ("alpha", _upstream_constant("alpha"))


def test_gate_first_experts_report_no_layout_options() -> None:
    experts = read_model("qwen3_moe").moe.experts
    assert (experts.transposed, experts.gate_up_bias, experts.down_bias, experts.gated_unit) == (False, "", "", "")


def test_fit_guards_gpt_oss_experts_with_every_slot_option() -> None:
    fit = fit_model(read_model("gpt_oss"))
    assert not fit.refused and "moe_experts" in fit.guarded
    assert fit.arguments["experts"] == {
        "sparse_block": "GptOssMLP",
        "activation": '"silu"',
        "block_attr": "mlp",
        "layout": "transposed",
        "interleaved": True,
        "gate_up_bias": "gate_up_proj_bias",
        "down_bias": "down_proj_bias",
        "limit": "self.experts.limit",
        "alpha": "self.experts.alpha",
    }


def test_fit_skips_interleaved_experts_whose_gated_unit_was_not_recognised() -> None:
    structure = read_model("gpt_oss")
    unrecognised = replace(structure.moe.experts, gated_unit="", transposed=False)
    fit = fit_model(replace(structure, moe=replace(structure.moe, experts=unrecognised)))
    assert fit.arguments["experts"] is None
    assert any(f.structure == "experts" and "[E, 2I, H] gate-first" in f.reason for f in fit.skipped)


def test_rendered_recipe_names_every_layout_option() -> None:
    _, call = recipe_call("moe", "GptOss", fit_model(read_model("gpt_oss")).arguments)
    for option in (
        'layout="transposed"',
        "interleaved=True",
        'gate_up_bias="gate_up_proj_bias"',
        'down_bias="down_proj_bias"',
        'limit="self.experts.limit"',
        'alpha="self.experts.alpha"',
    ):
        assert option in call


def test_rendered_recipe_of_gate_first_experts_names_only_the_activation() -> None:
    _, call = recipe_call("moe", "Qwen3Moe", fit_model(read_model("qwen3_moe")).arguments)
    assert 'experts=Experts("Qwen3MoeSparseMoeBlock", activation="self.experts.config.hidden_act")' in call
