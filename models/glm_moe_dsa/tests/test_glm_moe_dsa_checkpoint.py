"""GLM-MoE-DSA checkpoints: the hub layout round-trips through load_checkpoint and back to upstream, and every
error of the converter names the key and the cause.

The hub layout is the modeling's names with one ``gate_proj``/``up_proj``/``down_proj`` per routed expert
(transformers fuses them on load with its "qwen2_moe" conversion), plus GLM's multi-token-prediction layer
after the last decoder layer. The source model gets random correction biases and non-constant norm weights
first, so a buffer or norm that is not loaded shows in the logits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel

from modelgraft.models.checkpoint import INDEX_FILE, CheckpointError, load_checkpoint
from modelgraft.models.converters import ConversionError, converter_for
from modelgraft.models.converters.deepseek import DeepseekCheckpointConverter
from modelgraft.models.glm_moe_dsa.checkpoint import hub_state_dict
from modelgraft.models.glm_moe_dsa.tests.test_glm_moe_dsa_parity import GLM_MOE_DSA, randomize_correction_bias
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.moe_suite import _write_sharded
from modelgraft.models.testing.parity import randomize_constant_parameters

EXPERTS = "model.layers.1.mlp.experts"


def _upstream() -> PreTrainedModel:
    seed_everything(0)
    model = get_model_class("glm_moe_dsa", GLM_MOE_DSA.causal_lm, use_hf=True)(GLM_MOE_DSA.config()).float().eval()
    randomize_constant_parameters(model, seed=0)
    randomize_correction_bias(model)
    return model


def _generated(backend: str = "gpu") -> PreTrainedModel:
    seed_everything(1)  # other initial weights: everything must come from the checkpoint
    return build_model(GLM_MOE_DSA.config(), architecture=GLM_MOE_DSA.causal_lm, backend=backend).float().eval()


def _logits(model: PreTrainedModel) -> torch.Tensor:
    batch = causal_lm_batch(model.config)
    del batch["labels"]
    with torch.no_grad():
        return model(**batch).logits


def _save(tensors: dict[str, torch.Tensor], path: Path) -> Path:
    save_file({key: tensor.contiguous() for key, tensor in tensors.items()}, str(path))
    return path


def _converter() -> DeepseekCheckpointConverter:
    converter = converter_for(GLM_MOE_DSA.config())
    assert isinstance(converter, DeepseekCheckpointConverter)
    return converter


def _mtp_layer(state_dict: dict[str, torch.Tensor], layer: int) -> dict[str, torch.Tensor]:
    """A multi-token-prediction layer as the hub stores it: a sparse decoder layer plus GLM's MTP projections."""
    tensors = {key.replace("model.layers.1.", f"model.layers.{layer}.", 1): t for key, t in state_dict.items()}
    tensors = {key: t for key, t in tensors.items() if key.startswith(f"model.layers.{layer}.")}
    hidden = GLM_MOE_DSA.config().hidden_size
    tensors[f"model.layers.{layer}.eh_proj.weight"] = torch.randn(hidden, 2 * hidden)
    tensors[f"model.layers.{layer}.enorm.weight"] = torch.ones(hidden)
    tensors[f"model.layers.{layer}.shared_head.norm.weight"] = torch.ones(hidden)
    return tensors


# -- the round trip -----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", GLM_MOE_DSA.backends)
def test_sharded_hub_checkpoint_loads_and_exports_to_upstream_logits(backend: str, tmp_path: Path) -> None:
    """Hub shards + index -> load_checkpoint -> upstream's logits -> hub_state_dict export -> upstream
    from_pretrained -> upstream's logits and state again."""
    upstream = _upstream()
    hub, export = tmp_path / "hub", tmp_path / "export"
    _write_sharded(hub_state_dict(upstream.state_dict()), hub)
    assert (hub / INDEX_FILE).is_file() and len(list(hub.glob("*.safetensors"))) == 2
    generated = _generated(backend)
    load_checkpoint(generated, hub)
    assert torch.equal(_logits(generated), _logits(upstream))

    generated.config.save_pretrained(export)
    _write_sharded(hub_state_dict(generated.state_dict()), export)
    cls = get_model_class("glm_moe_dsa", GLM_MOE_DSA.causal_lm, use_hf=True)
    reloaded = cls.from_pretrained(export, attn_implementation="eager", experts_implementation="eager").float().eval()
    assert torch.equal(_logits(reloaded), _logits(upstream))
    for name, tensor in upstream.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


def test_hub_layout_has_one_tensor_per_expert_and_keeps_every_other_name() -> None:
    state = _upstream().state_dict()
    hub = hub_state_dict(state)
    config = GLM_MOE_DSA.config()
    assert f"{EXPERTS}.gate_up_proj" not in hub
    assert hub[f"{EXPERTS}.0.gate_proj.weight"].shape == (config.moe_intermediate_size, config.hidden_size)
    assert hub[f"{EXPERTS}.7.down_proj.weight"].shape == (config.hidden_size, config.moe_intermediate_size)
    assert torch.equal(hub[f"{EXPERTS}.2.up_proj.weight"], state[f"{EXPERTS}.gate_up_proj"][2, 28:])
    others = {key for key in state if ".mlp.experts." not in key}
    assert others <= set(hub)
    assert all(torch.equal(hub[key], state[key]) for key in others)


def test_upstreams_save_pretrained_loads_to_upstream_logits(tmp_path: Path) -> None:
    """What transformers writes itself (its save reverses the fusing: per-expert keys) loads too."""
    upstream = _upstream()
    upstream.save_pretrained(tmp_path)
    generated = _generated()
    load_checkpoint(generated, tmp_path)
    assert torch.equal(_logits(generated), _logits(upstream))


def test_shared_experts_dense_mlp_router_and_indexer_pass_through_by_name() -> None:
    converter = _converter()
    for key in (
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.1.mlp.shared_experts.up_proj.weight",
        "model.layers.1.mlp.gate.weight",
        "model.layers.1.mlp.gate.e_score_correction_bias",
        "model.layers.0.self_attn.indexer.weights_proj.weight",
    ):
        assert not converter.can_handle(key), key


# -- the multi-token-prediction layer -----------------------------------------------------------------
def test_the_multi_token_prediction_layer_is_dropped(tmp_path: Path) -> None:
    upstream = _upstream()
    state = upstream.state_dict()
    tensors = {**hub_state_dict(state), **hub_state_dict(_mtp_layer(state, layer=3))}
    assert "model.layers.3.mlp.experts.0.gate_proj.weight" in tensors
    generated = _generated()
    result = load_checkpoint(generated, _save(tensors, tmp_path / "model.safetensors"))
    assert not any(key.startswith("model.layers.3.") for key in result.loaded)
    assert torch.equal(_logits(generated), _logits(upstream))


def test_a_layer_after_the_multi_token_prediction_layer_is_unexpected(tmp_path: Path) -> None:
    tensors = hub_state_dict(_upstream().state_dict())
    tensors["model.layers.4.input_layernorm.weight"] = torch.ones(GLM_MOE_DSA.config().hidden_size)
    with pytest.raises(CheckpointError, match=r"model\.layers\.4\.input_layernorm\.weight"):
        load_checkpoint(_generated(), _save(tensors, tmp_path / "model.safetensors"))


def test_a_config_without_multi_token_prediction_drops_no_layer() -> None:
    config = GLM_MOE_DSA.config(num_nextn_predict_layers=0)
    converter = converter_for(config)
    assert not converter.can_handle("model.layers.3.enorm.weight")
    assert _converter().can_handle("model.layers.3.enorm.weight")


# -- errors ---------------------------------------------------------------------------------------------
def test_fp8_scales_are_refused_by_name() -> None:
    key = "model.layers.0.self_attn.q_a_proj.weight_scale_inv"
    with pytest.raises(ConversionError, match=rf"{key}.*FP8-quantized GLM-MoE-DSA weight.*[Dd]equantize"):
        _converter().convert(key, torch.ones(1, 1))


def test_a_missing_expert_is_named(tmp_path: Path) -> None:
    tensors = hub_state_dict(_upstream().state_dict())
    del tensors[f"{EXPERTS}.5.down_proj.weight"]
    with pytest.raises(ConversionError, match=rf"{EXPERTS}\.<i>\.down_proj\.weight is missing expert\(s\) 5"):
        load_checkpoint(_generated(), _save(tensors, tmp_path / "model.safetensors"))


def test_an_expert_the_model_lacks_is_refused() -> None:
    config = GLM_MOE_DSA.config()
    key = f"{EXPERTS}.{config.num_local_experts}.gate_proj.weight"
    with pytest.raises(ConversionError, match=rf"expert {config.num_local_experts} does not exist"):
        _converter().convert(key, torch.zeros(config.moe_intermediate_size, config.hidden_size))


def test_an_expert_of_another_size_is_refused_naming_both_shapes() -> None:
    config = GLM_MOE_DSA.config()
    i, h = config.moe_intermediate_size, config.hidden_size
    with pytest.raises(ConversionError, match=rf"shape \[{i + 1}, {h}\]; expected \[{i}, {h}\]"):
        _converter().convert(f"{EXPERTS}.0.gate_proj.weight", torch.zeros(i + 1, h))


def test_a_tensor_given_per_expert_and_fused_is_refused(tmp_path: Path) -> None:
    state = _upstream().state_dict()
    tensors = hub_state_dict(state)
    tensors[f"{EXPERTS}.down_proj"] = state[f"{EXPERTS}.down_proj"]
    with pytest.raises(ConversionError, match=rf"{EXPERTS}\.down_proj"):
        load_checkpoint(_generated(), _save(tensors, tmp_path / "model.safetensors"))
