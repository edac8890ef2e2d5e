"""The sizes of the MoE benchmark, and how they become each zoo model's config.

One set of sizes serves every MoE model, so a model joins the benchmark without an edit; what differs
between models is only which config keys carry a size: the routed-expert count (``num_experts``,
``num_local_experts``, ``n_routed_experts``), the expert width (``moe_intermediate_size``, or
``intermediate_size`` where a model has no other MLP, as gpt_oss), multi-head latent attention's ranks
and head dims (DeepSeek-V3, GLM-MoE-DSA) in place of ``head_dim``, and a sparse-attention indexer's width.
Low-rank projection widths the sizes do not name keep the class default's share of its hidden size.
Everything else the sizes leave out is ``modelgraft.models.testing.tiny_config``'s tiny value or the config class's
default, which derives the per-layer lists (layer types, dense and sparse layers) for the benchmark's depth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Config keys that hold the number of routed experts, whichever a model uses.
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


@dataclass(frozen=True)
class MoeSizes:
    """Qwen3-30B-A3B's proportions at a quarter of its width (I / H = 0.375, 64 of its 128 experts, top-8).

    At these sizes qwen3_moe's routed experts are about 58% of a step's multiply-adds (attention
    projections 16%, attention scores 12%, lm_head 13%), close to the real model's share (about 60%).
    """

    hidden_size: int = 512
    moe_intermediate_size: int = 192
    num_experts: int = 64
    num_experts_per_tok: int = 8
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 64
    vocab_size: int = 4096
    seq_len: int = 512
    batch_size: int = 4
    warmup: int = 1
    #: Kernel rows: (experts, top-k, tokens) at hidden_size x moe_intermediate_size.
    kernel_shapes: tuple[tuple[int, int, int], ...] = field(default=((8, 2, 2048), (32, 4, 2048), (64, 8, 2048)))

    def config_overrides(
        self, defaults: Mapping[str, Any], aliases: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The sizes under the keys this config class has (``defaults``: its default ``to_dict()``).

        ``aliases`` is the class's ``attribute_map`` (alias -> key): an alias gets its key's value, since the
        tiny config may set the alias, which would otherwise win (DeepSeek-V4's ``intermediate_size`` is its
        ``moe_intermediate_size``).
        """
        keys = set(defaults)
        overrides: dict[str, Any] = {
            "hidden_size": self.hidden_size,
            "num_experts_per_tok": self.num_experts_per_tok,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": max(self.seq_len, 64),
        }
        if "moe_intermediate_size" in keys:
            overrides["moe_intermediate_size"] = self.moe_intermediate_size
            overrides["intermediate_size"] = 2 * self.hidden_size  # dense layers and shared experts
        else:
            overrides["intermediate_size"] = self.moe_intermediate_size  # the experts are the only MLP
        if "kv_lora_rank" in keys:
            overrides.update(self._latent_attention())
        if "index_topk" in keys:
            overrides.update(
                index_topk=self.seq_len // 4, index_head_dim=self.head_dim, index_n_heads=self.num_attention_heads // 2
            )
        if (defaults.get("n_group") or 1) > 1:
            # Group-limited routing (DeepSeek-V3: 8 groups, the best 4 kept): groups of 8 experts, half kept.
            n_group = max(1, min(defaults["n_group"], self.num_experts // 8))
            overrides.update(n_group=n_group, topk_group=max(1, n_group // 2))
        overrides.update(self._scaled_ranks(defaults, exclude=overrides))
        if "first_k_dense_replace" in keys:
            overrides["first_k_dense_replace"] = 1  # one dense layer in front, as the tiny configs keep
        overrides.update({key: self.num_experts for key in EXPERT_KEYS if key in keys})
        # head_dim goes in even where the class does not store it (qwen3_moe reads it as an extra attribute).
        chosen = {key: value for key, value in overrides.items() if key in keys or key == "head_dim"}
        chosen.update({alias: chosen[key] for alias, key in (aliases or {}).items() if key in chosen})
        return chosen

    def _scaled_ranks(self, defaults: Mapping[str, Any], *, exclude: Mapping[str, Any]) -> dict[str, int]:
        """Low-rank projection widths (``*_lora_rank``) the sizes do not set, at the class's own share of its width.

        A class default is the released model's rank; kept at a quarter of its hidden size it would make the
        projections several times too wide next to the experts (DeepSeek-V4's ``q_lora_rank`` and
        ``o_lora_rank`` are 1024 at hidden 4096: 128 here, not 1024 at hidden 512).
        """
        default_hidden = defaults.get("hidden_size")
        if not default_hidden:
            return {}
        return {
            key: max(1, round(value * self.hidden_size / default_hidden))
            for key, value in defaults.items()
            if key.endswith("_lora_rank") and key not in exclude and isinstance(value, int) and value > 0
        }

    def _latent_attention(self) -> dict[str, Any]:
        """DeepSeek-V3's MLA proportions at ``head_dim``: rope half a head, q / kv ranks 1/4 and 1/8 of hidden.

        MLA has no ``head_dim`` of its own (the config derives it from the rope dim) and one kv head per
        query head.
        """
        rope = self.head_dim // 2
        return {
            "head_dim": rope,
            "num_key_value_heads": self.num_attention_heads,
            "qk_rope_head_dim": rope,
            "qk_nope_head_dim": self.head_dim,
            "v_head_dim": self.head_dim,
            "q_lora_rank": self.hidden_size // 4,
            "kv_lora_rank": self.hidden_size // 8,
        }

    def describe(self) -> str:
        shapes = ", ".join(f"E{e}/k{k}/{t} tokens" for e, k, t in self.kernel_shapes)
        return (
            f"hidden {self.hidden_size}, expert intermediate {self.moe_intermediate_size}; kernel rows at {shapes}; "
            f"models: {self.num_experts} experts, top-{self.num_experts_per_tok}, {self.num_hidden_layers} layers, "
            f"heads {self.num_attention_heads}/kv {self.num_key_value_heads} x {self.head_dim} (MLA: rope "
            f"{self.head_dim // 2}, nope/v {self.head_dim}, ranks {self.hidden_size // 4}/{self.hidden_size // 8}), "
            f"vocab {self.vocab_size}, batch {self.batch_size} x seq {self.seq_len}, fp32, "
            "upstream's default attention (sdpa where the class supports it and keeps its masks, else eager), "
            "generated: fused_attention where upstream misses torch's fused CPU kernel (MLA, sinks, DSA)"
        )


SMOKE_SIZES = MoeSizes(
    hidden_size=64,
    moe_intermediate_size=32,
    num_experts=8,
    num_experts_per_tok=2,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=512,
    seq_len=32,
    batch_size=2,
    kernel_shapes=((8, 2, 256),),
)
