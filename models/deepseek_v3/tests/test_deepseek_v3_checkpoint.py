"""DeepSeek-V3 checkpoints in the hub's layout round-trip through load_checkpoint and back to upstream.

The hub layout (deepseek-ai/DeepSeek-V3) is the modeling's names with one linear per routed expert, plus the
multi-token-prediction layer after the last decoder layer. The round trip: upstream state_dict in that
layout, MTP layer included -> two safetensors shards + index -> load_checkpoint into the generated class ->
logits equal upstream's -> hub_state_dict export, sharded -> upstream from_pretrained -> logits and every
tensor equal. The correction biases get random values first, so a dropped or misplaced one shows. Every
error of the converter names the key and the cause.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import PreTrainedModel

from modelgraft.models.checkpoint import CheckpointError, load_checkpoint
from modelgraft.models.converters import ConversionError, converter_for
from modelgraft.models.converters.deepseek import DeepseekCheckpointConverter
from modelgraft.models.deepseek_v3.checkpoint import hub_state_dict
from modelgraft.models.deepseek_v3.tests.test_deepseek_v3_parity import DEEPSEEK_V3
from modelgraft.models.deepseek_v3.tests.test_deepseek_v3_routing import randomize_correction_biases
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.moe_suite import _write_sharded

#: The first sparse layer's routed experts, and the MTP layer of the tiny config (3 decoder layers: 0, 1, 2).
EXPERTS = "model.layers.1.mlp.experts"
MTP = "model.layers.3"


def _upstream() -> PreTrainedModel:
    seed_everything(0)
    model = get_model_class("deepseek_v3", DEEPSEEK_V3.causal_lm, use_hf=True)(DEEPSEEK_V3.config()).float().eval()
    randomize_correction_biases(model)
    return model


def _generated(backend: str = "gpu") -> PreTrainedModel:
    seed_everything(1)  # other initial weights than upstream's: everything must come from the checkpoint
    return build_model(DEEPSEEK_V3.config(), architecture=DEEPSEEK_V3.causal_lm, backend=backend).float().eval()


def _mtp_layer(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """A multi-token-prediction layer as the hub stores it: a decoder layer's keys plus its own projections."""
    hub = hub_state_dict(model.state_dict())
    layer = {
        key.replace("model.layers.2.", f"{MTP}.", 1): t for key, t in hub.items() if key.startswith("model.layers.2.")
    }
    hidden = model.config.hidden_size
    layer[f"{MTP}.eh_proj.weight"] = torch.randn(hidden, 2 * hidden)
    layer[f"{MTP}.enorm.weight"] = torch.ones(hidden)
    return layer


def _hub_checkpoint(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    return {**hub_state_dict(model.state_dict()), **_mtp_layer(model)}


def _logits(model: PreTrainedModel) -> torch.Tensor:
    batch = causal_lm_batch(model.config)
    del batch["labels"]
    with torch.no_grad():
        return model(**batch).logits


def _converter() -> DeepseekCheckpointConverter:
    converter = converter_for(DEEPSEEK_V3.config())
    assert isinstance(converter, DeepseekCheckpointConverter)
    return converter


def _save(tensors: dict[str, torch.Tensor], folder: Path) -> Path:
    path = folder / "model.safetensors"
    save_file({key: tensor.contiguous() for key, tensor in tensors.items()}, str(path))
    return path


@pytest.mark.parametrize("backend", DEEPSEEK_V3.backends)
def test_sharded_hub_checkpoint_loads_to_upstream_logits(backend: str, tmp_path: Path) -> None:
    upstream = _upstream()
    _write_sharded(_hub_checkpoint(upstream), tmp_path)
    generated = _generated(backend)
    load_checkpoint(generated, tmp_path)
    assert torch.equal(_logits(generated), _logits(upstream))


def test_a_loaded_model_exports_a_hub_checkpoint_upstream_loads_to_the_same_logits(tmp_path: Path) -> None:
    upstream = _upstream()
    source, export = tmp_path / "hub", tmp_path / "export"
    _write_sharded(_hub_checkpoint(upstream), source)
    generated = _generated()
    load_checkpoint(generated, source)

    generated.config.save_pretrained(export)
    _write_sharded(hub_state_dict(generated.state_dict()), export)
    cls = get_model_class("deepseek_v3", DEEPSEEK_V3.causal_lm, use_hf=True)
    reloaded = cls.from_pretrained(export, attn_implementation="eager", experts_implementation="eager").float().eval()
    assert torch.equal(_logits(reloaded), _logits(upstream))
    for name, tensor in upstream.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


def test_dense_layers_shared_experts_and_routers_load_under_their_own_names(tmp_path: Path) -> None:
    upstream = _upstream()
    untouched = [
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
        f"{EXPERTS[: -len('.experts')]}.shared_experts.up_proj.weight",
        f"{EXPERTS[: -len('.experts')]}.gate.weight",
        f"{EXPERTS[: -len('.experts')]}.gate.e_score_correction_bias",
    ]
    converter = _converter()
    assert not any(converter.can_handle(key) for key in untouched)
    generated = _generated()
    load_checkpoint(generated, _save(_hub_checkpoint(upstream), tmp_path))
    for key in untouched:
        assert torch.equal(generated.state_dict()[key], upstream.state_dict()[key]), key


def test_the_multi_token_prediction_layer_is_dropped_experts_and_all() -> None:
    upstream = _upstream()
    converter = _converter()
    for key, tensor in _mtp_layer(upstream).items():
        assert converter.can_handle(key) and converter.convert(key, tensor) == [], key
    assert converter.finalize() == []


def test_a_layer_past_the_multi_token_prediction_layer_is_not_in_the_model(tmp_path: Path) -> None:
    tensors = _hub_checkpoint(_upstream())
    tensors["model.layers.4.enorm.weight"] = torch.ones(4)
    with pytest.raises(CheckpointError, match=r"not in the model: model\.layers\.4\.enorm\.weight"):
        load_checkpoint(_generated(), _save(tensors, tmp_path))


def test_what_the_generated_save_pretrained_writes_fused_loads_back(tmp_path: Path) -> None:
    """Fused expert tensors (the modeling's own layout) pass through the converter."""
    upstream = _upstream()
    generated = _generated()
    load_checkpoint(generated, _save(upstream.state_dict(), tmp_path))
    assert torch.equal(_logits(generated), _logits(upstream))


def test_what_upstreams_save_pretrained_writes_loads_to_upstream_logits(tmp_path: Path) -> None:
    upstream = _upstream()
    upstream.save_pretrained(tmp_path)
    generated = _generated()
    load_checkpoint(generated, tmp_path)
    assert torch.equal(_logits(generated), _logits(upstream))


def test_an_fp8_scale_is_refused_by_name() -> None:
    with pytest.raises(ConversionError, match=r"model\.layers\.0\.mlp\.gate_proj\.weight_scale_inv.*FP8"):
        _converter().convert("model.layers.0.mlp.gate_proj.weight_scale_inv", torch.ones(2, 2))


def test_a_missing_expert_is_named(tmp_path: Path) -> None:
    tensors = _hub_checkpoint(_upstream())
    del tensors[f"{EXPERTS}.3.down_proj.weight"]
    with pytest.raises(ConversionError, match=rf"{EXPERTS}\.<i>\.down_proj\.weight is missing expert\(s\) 3"):
        load_checkpoint(_generated(), _save(tensors, tmp_path))


def test_an_expert_the_model_lacks_is_named() -> None:
    experts = DEEPSEEK_V3.config().n_routed_experts
    key = f"{EXPERTS}.{experts}.gate_proj.weight"
    with pytest.raises(ConversionError, match=rf"expert {experts} does not exist"):
        _converter().convert(key, torch.zeros(1))


def test_an_expert_of_the_wrong_shape_is_named() -> None:
    key = f"{EXPERTS}.0.up_proj.weight"
    with pytest.raises(ConversionError, match=rf"{key}.*has shape \[5, 7\]"):
        _converter().convert(key, torch.zeros(5, 7))


def test_an_expert_given_twice_is_named() -> None:
    config = DEEPSEEK_V3.config()
    key = f"{EXPERTS}.2.gate_proj.weight"
    piece = torch.zeros(config.moe_intermediate_size, config.hidden_size)
    converter = _converter()
    converter.convert(key, piece)
    with pytest.raises(ConversionError, match=rf"{key}.*appears twice"):
        converter.convert(key, piece)


def test_one_ranks_converter_fuses_its_experts_and_still_drops_the_mtp_layer() -> None:
    """Expert parallelism: for_experts keeps the DeepSeek handling around the narrower fusing."""
    upstream = _upstream()
    rank = _converter().for_experts(0, 4)
    assert isinstance(rank, DeepseekCheckpointConverter)
    tensors = _hub_checkpoint(upstream).items()
    out = dict(pair for key, tensor in tensors if rank.can_handle(key) for pair in rank.convert(key, tensor))
    assert rank.finalize() == []
    assert rank.expert_of(f"{EXPERTS}.5.gate_proj.weight") == 5
    fused = upstream.state_dict()[f"{EXPERTS}.gate_up_proj"]
    assert torch.equal(out[f"{EXPERTS}.gate_up_proj"], fused[:4])
    assert not any(key.startswith(f"{MTP}.") for key in out)
