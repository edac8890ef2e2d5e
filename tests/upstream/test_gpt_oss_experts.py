"""gpt_oss's experts, read from upstream and fitted: every layout option of the moe_experts slot comes from its source.

GptOssExperts stores ``gate_up_proj [E, H, 2I]`` applied as ``x @ W[e]``, interleaved gate/up columns, a
bias after each matmul and a clamped SwiGLU whose limit and alpha its ``__init__`` reads from the config
(``config.swiglu_limit``, ``config.swiglu_alpha`` in the pinned transformers; constants in older ones). The
reader must report each of these from the source, and the fit must pass them all to the guard.
"""

from __future__ import annotations

import ast
from dataclasses import replace

import pytest

from modelgraft.generator.recipes.fit import fit_model
from modelgraft.generator.recipes.render import recipe_call
from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.read_moe import read_moe
from modelgraft.generator.upstream.reader import model_file
from modelgraft.generator.upstream.source import ModelSource

from .readings import read_model

#: What the reader finds in the pinned transformers: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts


def _experts_class(text: str) -> ast.ClassDef:
    return next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "GptOssExperts")


def _upstream_setting(attr: str) -> tuple[float, str]:
    """(value, config field) of what GptOssExperts.__init__ assigns to ``self.<attr>``, read independently of
    the reader: a constant gives (it, ""), ``config.<field>`` the field's default in the config class."""
    for node in ast.walk(_experts_class(model_file("gpt_oss").read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == f"self.{attr}":
            if isinstance(node.value, ast.Constant):
                return float(node.value.value), ""
            assert isinstance(node.value, ast.Attribute) and ast.unparse(node.value.value) == "config"
            field = node.value.attr
            config = model_file("gpt_oss").with_name("configuration_gpt_oss.py").read_text(encoding="utf-8")
            for stmt in ast.walk(ast.parse(config)):
                if isinstance(stmt, ast.AnnAssign) and ast.unparse(stmt.target) == field:
                    return float(ast.literal_eval(stmt.value)), field
            raise AssertionError(f"GptOssConfig declares no {field}")
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
    assert (experts.limit_attr, (experts.limit, experts.limit_config)) == ("limit", _upstream_setting("limit"))
    assert (experts.alpha_attr, (experts.alpha, experts.alpha_config)) == ("alpha", _upstream_setting("alpha"))


def test_the_pinned_gpt_oss_reads_its_clamp_limit_and_alpha_from_the_config() -> None:
    experts = read_model("gpt_oss").moe.experts
    assert (experts.limit_config, experts.alpha_config) == ("swiglu_limit", "swiglu_alpha")
    assert (experts.limit, experts.alpha) == (7.0, 1.702)


def test_experts_assigning_the_clamp_limit_and_alpha_as_constants_are_recognised_too(tmp_path) -> None:
    """The same experts with numbers in ``__init__`` (gpt_oss's form before the config fields existed)."""
    experts = _experts_class(model_file("gpt_oss").read_text(encoding="utf-8"))
    for node in ast.walk(experts):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) in ("self.limit", "self.alpha"):
            node.value = ast.Constant(3.5 if ast.unparse(node.targets[0]) == "self.limit" else 1.25)
    module = tmp_path / "modeling_toy.py"
    module.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        f"{ast.unparse(experts)}\n\n\n"
        "class ToySparseMoeBlock(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n"
        "        self.experts = GptOssExperts(config)\n",
        encoding="utf-8",
    )
    source = ModelSource(model="toy", index=ModuleIndex.parse("toy.modeling_toy", module), sources=UpstreamSources())
    found = read_moe(source, None).experts
    assert (found.gated_unit, found.transposed) == ("clamped_swiglu", True)
    assert (found.limit_attr, found.limit, found.limit_config) == ("limit", 3.5, "")
    assert (found.alpha_attr, found.alpha, found.alpha_config) == ("alpha", 1.25, "")


def test_experts_whose_clamp_limit_is_neither_a_number_nor_a_config_field_are_not_recognised(tmp_path) -> None:
    experts = _experts_class(model_file("gpt_oss").read_text(encoding="utf-8"))
    for node in ast.walk(experts):
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "self.limit":
            node.value = ast.parse("max(config.swiglu_limit, 1.0)", mode="eval").body
    module = tmp_path / "modeling_toy.py"
    module.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        f"{ast.unparse(experts)}\n\n\n"
        "class ToySparseMoeBlock(nn.Module):\n    def __init__(self, config):\n        super().__init__()\n"
        "        self.experts = GptOssExperts(config)\n",
        encoding="utf-8",
    )
    source = ModelSource(model="toy", index=ModuleIndex.parse("toy.modeling_toy", module), sources=UpstreamSources())
    assert read_moe(source, None).experts.gated_unit == ""


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
