"""DeepSeek-V4 checkpoints: the hub's reference naming and per-expert weights <-> the generated modeling.

Hub checkpoints (deepseek-ai/DeepSeek-V4-Flash, ...) keep the key names of DeepSeek's reference code, with
no ``model.`` prefix: ``embed.weight``, ``head.weight``, ``layers.<l>.attn.wq_a.weight``,
``layers.<l>.attn.compressor.wkv.weight``, ``layers.<l>.attn.indexer.compressor.ape``,
``layers.<l>.ffn.gate.bias``, ``layers.<l>.hc_attn_fn``, ``hc_head_fn``, ..., and one linear per routed
expert: ``layers.<l>.ffn.experts.<e>.{w1,w3,w2}.weight`` (gate ``[I, H]``, up ``[I, H]``, down ``[H, I]``).
The pinned transformers' modeling names them ``model.layers.<l>.self_attn.q_a_proj.weight``, ... and holds
the experts fused: ``experts.gate_up_proj [E, 2I, H]`` (gate rows first) and ``experts.down_proj [E, H, I]``.
transformers converts on load with the "deepseek_v4" entry of ``conversion_mapping.py``; the renames
below are the same facts, and the fusing is :class:`~models.converters.moe.FusedExpertsConverter` with
DeepSeek's projection names. The same converter reads what upstream's ``save_pretrained`` writes: its
reverse renames leave the ``model.`` prefix and rename a few keys only partly
(``model.layers.0.attn.norm.weight`` for the attention's ``kv_norm``), and the renames, applied to every
key without its ``model.`` prefix, land each on the modeling's name. Multi-token-prediction keys
(``mtp.*``) have no module in the modeling and are dropped, as upstream ignores them. Quantized checkpoints (FP8 / FP4 weights with ``.scale`` tensors) are
refused: casting them would load wrong values without a word.

Registered for model_type "deepseek_v4" in ``models/deepseek_v4/__init__.py``; ``load_checkpoint`` uses it.
:func:`hub_state_dict` is the reverse, for exporting a checkpoint that upstream's ``from_pretrained`` loads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from modelgraft.models.converters.base import ConversionError
from modelgraft.models.converters.moe import FusedExpertsConverter

if TYPE_CHECKING:
    from transformers import DeepseekV4Config

__all__ = ["DeepseekV4CheckpointConverter", "checkpoint_converter", "hub_key", "hub_state_dict", "model_key"]

#: DeepSeek's projection names of one routed expert: gate, up, down.
EXPERT_PROJECTIONS = ("w1", "w3", "w2")

#: Hub name -> modeling name, applied in order, every matching rule (the order of upstream's mapping).
_TO_MODEL: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"\.attn\.", ".self_attn."),
        (r"\.ffn\.", ".mlp."),
        (r"\.indexer\.compressor\.", ".compressor.indexer."),
        (r"^embed\.weight$", "embed_tokens.weight"),
        (r"^head\.weight$", "lm_head.weight"),
        (r"^hc_head_(fn|base|scale)$", r"hc_head.hc_\1"),
        (r"\.attn_norm\.", ".input_layernorm."),
        (r"\.ffn_norm\.", ".post_attention_layernorm."),
        (r"\.hc_attn_(fn|base|scale)$", r".attn_hc.\1"),
        (r"\.hc_ffn_(fn|base|scale)$", r".ffn_hc.\1"),
        (r"\.attn_sink$", ".sinks"),
        (r"\.indexer\.weights_proj\.", ".compressor.indexer.scorer.weights_proj."),
        (r"\.indexer\.wq_b\.", ".compressor.indexer.q_b_proj."),
        (r"\.norm\.", ".kv_norm."),
        (r"\.ape$", ".position_bias"),
        (r"\.wq_a\.", ".q_a_proj."),
        (r"\.self_attn\.wq_b\.", ".self_attn.q_b_proj."),
        (r"\.wkv\.", ".kv_proj."),
        (r"\.wgate\.", ".gate_proj."),
        (r"\.wo_a\.", ".o_a_proj."),
        (r"\.wo_b\.", ".o_b_proj."),
        (r"\.q_norm\.", ".q_a_norm."),
        (r"\.gate\.bias$", ".gate.e_score_correction_bias"),
        (r"\.shared_experts\.w1\.", ".shared_experts.gate_proj."),
        (r"\.shared_experts\.w2\.", ".shared_experts.down_proj."),
        (r"\.shared_experts\.w3\.", ".shared_experts.up_proj."),
    )
)

#: Modeling name (``model.`` prefix removed) -> hub name, applied in order, every matching rule.
_TO_HUB: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"^embed_tokens\.weight$", "embed.weight"),
        (r"^lm_head\.weight$", "head.weight"),
        (r"^hc_head\.hc_(fn|base|scale)$", r"hc_head_\1"),
        (r"\.input_layernorm\.", ".attn_norm."),
        (r"\.post_attention_layernorm\.", ".ffn_norm."),
        (r"\.attn_hc\.(fn|base|scale)$", r".hc_attn_\1"),
        (r"\.ffn_hc\.(fn|base|scale)$", r".hc_ffn_\1"),
        (r"\.sinks$", ".attn_sink"),
        (r"\.compressor\.(indexer\.)?kv_norm\.", r".compressor.\1norm."),
        (r"\.compressor\.indexer\.scorer\.weights_proj\.", ".indexer.weights_proj."),
        (r"\.compressor\.indexer\.q_b_proj\.", ".indexer.wq_b."),
        (r"\.compressor\.indexer\.", ".indexer.compressor."),
        (r"\.position_bias$", ".ape"),
        (r"\.shared_experts\.gate_proj\.", ".shared_experts.w1."),
        (r"\.shared_experts\.up_proj\.", ".shared_experts.w3."),
        (r"\.shared_experts\.down_proj\.", ".shared_experts.w2."),
        (r"\.q_a_proj\.", ".wq_a."),
        (r"\.self_attn\.q_b_proj\.", ".self_attn.wq_b."),
        (r"\.kv_proj\.", ".wkv."),
        (r"\.gate_proj\.", ".wgate."),
        (r"\.o_a_proj\.", ".wo_a."),
        (r"\.o_b_proj\.", ".wo_b."),
        (r"\.q_a_norm\.", ".q_norm."),
        (r"\.gate\.e_score_correction_bias$", ".gate.bias"),
        (r"\.self_attn\.", ".attn."),
        (r"\.mlp\.", ".ffn."),
    )
)

_LOW_PRECISION = tuple(getattr(torch, name) for name in dir(torch) if name.startswith(("float8_", "float4_")))
_MTP = re.compile(r"(^|\.)mtp\.")


def _rewrite(key: str, rules: tuple[tuple[re.Pattern[str], str], ...]) -> str:
    for pattern, replacement in rules:
        key = pattern.sub(replacement, key)
    return key


def model_key(key: str) -> str:
    """The modeling's name of ``key``: a hub name (``layers.0.attn.wq_a.weight`` ->
    ``model.layers.0.self_attn.q_a_proj.weight``), the mix of both that upstream's ``save_pretrained`` writes
    (``model.layers.0.attn.norm.weight``), or a modeling name, which it returns unchanged.
    """
    renamed = _rewrite(key.removeprefix("model."), _TO_MODEL)
    return renamed if renamed.startswith("lm_head.") else f"model.{renamed}"


def hub_key(key: str) -> str:
    """The hub's name of modeling key ``key``; ``model_key(hub_key(k)) == k`` for every key of the modeling."""
    return _rewrite(key.removeprefix("model."), _TO_HUB)


def hub_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` of the modeling in the hub's layout: reference names, one ``w1``/``w3``/``w2`` per expert.

    What upstream's ``from_pretrained`` reads back (its "deepseek_v4" conversion fuses the experts again).
    """
    gate, up, down = EXPERT_PROJECTIONS
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        module, _, name = key.rpartition(".")
        if module.endswith(".experts") and name == "gate_up_proj":
            for expert, fused in enumerate(tensor):
                gate_rows, up_rows = fused.chunk(2, dim=0)
                out[hub_key(f"{module}.{expert}.{gate}.weight")] = gate_rows.clone()
                out[hub_key(f"{module}.{expert}.{up}.weight")] = up_rows.clone()
        elif module.endswith(".experts") and name == "down_proj":
            for expert, fused in enumerate(tensor):
                out[hub_key(f"{module}.{expert}.{down}.weight")] = fused.clone()
        else:
            out[hub_key(key)] = tensor.clone()
    return out


def _quantized(key: str, tensor: torch.Tensor) -> bool:
    """An FP8/FP4 weight, or the scale of one (the mHC's own ``attn_hc.scale`` / ``ffn_hc.scale`` are parameters)."""
    if tensor.dtype in _LOW_PRECISION or key.endswith(".scale_inv"):
        return True
    return key.endswith(".scale") and not key.endswith("_hc.scale")


class DeepseekV4CheckpointConverter:
    """Reference names -> modeling names, then per-expert ``w1``/``w3``/``w2`` -> the fused expert tensors.

    Handles every key whose name changes (hub names, and the partly renamed keys upstream's
    ``save_pretrained`` writes), per-expert and fused expert keys, and multi-token-prediction keys (dropped);
    other keys already carry the modeling's names and load as they are.
    """

    def __init__(self, experts: FusedExpertsConverter) -> None:
        self.experts = experts

    def can_handle(self, key: str) -> bool:
        return bool(_MTP.search(key)) or model_key(key) != key or self.experts.can_handle(key)

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        if _MTP.search(key):
            return []
        renamed = model_key(key)
        if _quantized(renamed, tensor):
            raise ConversionError(
                f"{key!r} ({tensor.dtype}) belongs to a quantized (FP8/FP4) DeepSeek-V4 checkpoint; "
                "dequantize it to bf16 before loading it into the generated modeling"
            )
        if self.experts.can_handle(renamed):
            return self.experts.convert(renamed, tensor)
        return [(renamed, tensor)]

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        return self.experts.finalize()

    def export(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """One whole modeling entry under the hub's names, its routed experts one ``w1``/``w3``/``w2`` each."""
        return [(hub_key(name), value) for name, value in self.experts.export(key, tensor)]


def checkpoint_converter(config: DeepseekV4Config) -> DeepseekV4CheckpointConverter:
    """A fresh converter for one checkpoint of a model built from ``config``."""
    gate, up, down = EXPERT_PROJECTIONS
    return DeepseekV4CheckpointConverter(
        FusedExpertsConverter(
            num_experts=config.n_routed_experts,
            hidden_size=config.hidden_size,
            intermediate_size=config.moe_intermediate_size,
            gate=gate,
            up=up,
            down=down,
        )
    )
