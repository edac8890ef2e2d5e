"""gpt_oss checkpoints: the bf16 hub layout round-trips through load_checkpoint and back to upstream, and every
converter error names the key and the cause.

The hub layout is upstream's modeling layout (the pinned transformers has no conversion_mapping.py entry for
gpt_oss), so the round trip is: upstream state_dict -> two safetensors shards + index -> load_checkpoint
into the generated class -> logits equal upstream's -> the generated class's save_pretrained -> upstream
from_pretrained -> logits equal again. Biases and sinks get non-zero values first (upstream initialises
the expert biases to zeros), so a dropped or misplaced one shows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import GptOssConfig, GptOssForCausalLM

from modelgraft.models.checkpoint import INDEX_FILE, load_checkpoint
from modelgraft.models.converters import ConversionError, converter_for
from modelgraft.models.gpt_oss.checkpoint import GptOssExpertsConverter
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.parity import randomize_constant_parameters
from modelgraft.models.testing.tiny import tiny_config_for

EXPERTS = "model.layers.0.mlp.experts"


def _config(**overrides: object) -> GptOssConfig:
    return tiny_config_for(GptOssConfig, experts_implementation="eager", **overrides)


def _upstream(config: GptOssConfig) -> GptOssForCausalLM:
    seed_everything(0)
    model = GptOssForCausalLM(config).float().eval()
    randomize_constant_parameters(model, seed=0)
    return model


def _write_sharded(tensors: dict[str, torch.Tensor], folder: Path) -> None:
    """Two shards and an index; keys alternate, so every layer's expert tensors straddle both shards."""
    folder.mkdir(parents=True, exist_ok=True)
    shards: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] = ({}, {})
    for position, (key, tensor) in enumerate(tensors.items()):
        shards[position % 2][key] = tensor.contiguous()
    weight_map = {}
    for number, shard in enumerate(shards, start=1):
        name = f"model-0000{number}-of-00002.safetensors"
        save_file(shard, str(folder / name))
        weight_map.update(dict.fromkeys(shard, name))
    (folder / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}), encoding="utf-8")


def _logits(model: torch.nn.Module, config: GptOssConfig) -> torch.Tensor:
    batch = causal_lm_batch(config)
    del batch["labels"]
    with torch.no_grad():
        return model(**batch).logits


def _converter(config: GptOssConfig | None = None) -> GptOssExpertsConverter:
    converter = converter_for(config or _config())
    assert isinstance(converter, GptOssExpertsConverter)
    return converter


def _expert_tensors(config: GptOssConfig) -> dict[str, torch.Tensor]:
    e, h, i = config.num_local_experts, config.hidden_size, config.intermediate_size
    return {
        "gate_up_proj": torch.randn(e, h, 2 * i),
        "gate_up_proj_bias": torch.randn(e, 2 * i),
        "down_proj": torch.randn(e, i, h),
        "down_proj_bias": torch.randn(e, h),
    }


def test_sharded_hub_checkpoint_loads_to_upstream_logits(tmp_path: Path) -> None:
    config = _config()
    upstream = _upstream(config)
    _write_sharded(upstream.state_dict(), tmp_path)
    seed_everything(1)  # other initial weights: everything must come from the checkpoint
    generated = build_model(config, architecture="GptOssForCausalLM").float().eval()
    load_checkpoint(generated, tmp_path)
    assert torch.equal(_logits(generated, config), _logits(upstream, config))


def test_exported_checkpoint_loads_in_upstream_from_pretrained(tmp_path: Path) -> None:
    config = _config()
    upstream = _upstream(config)
    _write_sharded(upstream.state_dict(), tmp_path / "hub")
    seed_everything(1)
    generated = build_model(config, architecture="GptOssForCausalLM").float().eval()
    load_checkpoint(generated, tmp_path / "hub")
    generated.save_pretrained(tmp_path / "export")
    reloaded = GptOssForCausalLM.from_pretrained(tmp_path / "export", experts_implementation="eager").float().eval()
    assert torch.equal(_logits(reloaded, config), _logits(upstream, config))


def test_upstream_save_pretrained_loads_in_the_generated_from_pretrained(tmp_path: Path) -> None:
    config = _config()
    upstream = _upstream(config)
    upstream.save_pretrained(tmp_path)
    generated_cls = get_model_class("gpt_oss", "GptOssForCausalLM")
    generated, info = generated_cls.from_pretrained(tmp_path, experts_implementation="eager", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert torch.equal(_logits(generated.float().eval(), config), _logits(upstream, config))


def test_converter_passes_each_expert_tensor_through_unchanged() -> None:
    config = _config()
    converter = _converter(config)
    for name, tensor in _expert_tensors(config).items():
        [(key, out)] = converter.convert(f"{EXPERTS}.{name}", tensor)
        assert key == f"{EXPERTS}.{name}" and out is tensor
    assert converter.finalize() == []


def test_converter_handles_expert_keys_only() -> None:
    converter = _converter()
    assert converter.can_handle(f"{EXPERTS}.gate_up_proj_bias")
    assert not converter.can_handle("model.layers.0.mlp.router.weight")
    assert not converter.can_handle("model.layers.0.self_attn.sinks")


@pytest.mark.parametrize("suffix", ["_blocks", "_scales"])
def test_mxfp4_quantized_keys_are_refused_with_how_to_dequantize(suffix: str) -> None:
    key = f"{EXPERTS}.gate_up_proj{suffix}"
    with pytest.raises(ConversionError, match=rf"{key}: an MXFP4-quantized .*Mxfp4Config\(dequantize=True\)"):
        _converter().convert(key, torch.zeros(2, 2, dtype=torch.uint8))


def test_per_expert_keys_are_refused() -> None:
    key = f"{EXPERTS}.0.gate_proj.weight"
    with pytest.raises(ConversionError, match=rf"{key}: not an expert tensor of gpt_oss"):
        _converter().convert(key, torch.zeros(3, 3))


def test_a_transposed_tensor_is_refused_even_when_its_shape_fits_both_layouts() -> None:
    # H == 2I: a gate_up_proj has the same shape in both orientations, so the converter never guesses the
    # orientation from shapes; it checks each tensor against the layout the config implies, and a down_proj
    # exported the other way round ([E, H, I]) is refused instead of being transposed.
    config = _config(hidden_size=48, intermediate_size=24)
    converter = _converter(config)
    e, h, i = config.num_local_experts, config.hidden_size, config.intermediate_size
    with pytest.raises(ConversionError, match=rf"down_proj: shape \({e}, {h}, {i}\), but gpt_oss stores down_proj"):
        converter.convert(f"{EXPERTS}.down_proj", torch.zeros(e, h, i))


def test_a_tensor_of_another_size_is_refused_naming_the_expected_shape() -> None:
    config = _config()
    e, i = config.num_local_experts, config.intermediate_size
    with pytest.raises(ConversionError, match=rf"gate_up_proj_bias: shape .* as \[E, 2I\] = \({e}, {2 * i}\)"):
        _converter(config).convert(f"{EXPERTS}.gate_up_proj_bias", torch.zeros(e + 1, 2 * i))


def test_a_tensor_given_twice_is_refused() -> None:
    config = _config()
    converter = _converter(config)
    tensor = _expert_tensors(config)["down_proj_bias"]
    converter.convert(f"{EXPERTS}.down_proj_bias", tensor)
    with pytest.raises(ConversionError, match=rf"{EXPERTS}.down_proj_bias: given twice"):
        converter.convert(f"{EXPERTS}.down_proj_bias", tensor)


def test_finalize_names_the_missing_expert_tensors_of_each_layer() -> None:
    config = _config()
    converter = _converter(config)
    tensors = _expert_tensors(config)
    converter.convert(f"{EXPERTS}.gate_up_proj", tensors["gate_up_proj"])
    converter.convert(f"{EXPERTS}.down_proj", tensors["down_proj"])
    with pytest.raises(ConversionError, match=rf"{EXPERTS}: gate_up_proj_bias, down_proj_bias"):
        converter.finalize()
