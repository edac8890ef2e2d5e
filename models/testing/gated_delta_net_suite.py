"""The checks a Gated DeltaNet hybrid adds to its dense or MoE parity suite (a scaffold of olmo_hybrid, qwen3_next).

The suite it is mixed into checks the training step: the gated norm, the whole-sequence causal conv and the
chunked delta rule go through their slots there, each reference kernel bound alone with the call counter. Two
slots are called only from a cache, one token at a time (``causal_conv1d_update``, ``recurrent_gated_delta_rule``):
the training-step tests skip them, with the reason, and :meth:`test_reference_decode_kernel_matches_upstreams_cached_decode_step`
binds each one on a prefill then a decode step. Where upstream's mixer hands packed documents' ``cu_seq_lens_q``
to the delta rule (``packed_mixer``), the ``chunked_delta`` CPU kernels must give each document its own outputs, as
if run alone: the departure from upstream's eager path the kernels are for (docs/design.md, "Where the code departs
from the design contract").

Mix it in first: ``class TestOlmoHybridParity(GatedDeltaNetSuite, DenseParitySuite)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
import torch
from transformers import PreTrainedConfig

from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops
from modelgraft.models.testing.batches import causal_lm_batch
from modelgraft.models.testing.parity import Tolerance, assert_within, build_pair
from modelgraft.models.testing.reference import DECODE_SLOTS, reference_kernel

__all__ = [
    "CHUNKED_DELTA",
    "DECODE_SLOTS",
    "GatedDeltaNetSuite",
    "check_cached_decode_step",
    "check_packed_documents",
    "decode_logits",
    "decode_logits_with_reference",
    "decode_step_reason",
    "packed_document_kwargs",
    "packed_document_ops",
]

#: A document's packed outputs against its outputs alone: the same operations on the same rows, up to reassociation.
_DOCUMENT_TOLERANCE = Tolerance(rtol=1e-5, atol=0.0, norm_wise=True)

#: The chunked_delta CPU family on both slots it serves.
CHUNKED_DELTA = OpsConfig({"chunk_gated_delta_rule": "chunked_delta", "causal_conv1d": "chunked_delta"})


#: Upstream's layer kinds whose mixers read packed documents' boundaries from ``cu_seq_lens_q`` (transformers'
#: ``ALLOWED_LAYER_TYPES``): a Gated DeltaNet's, and a short convolution's (lfm2, lfm3).
_MIXER_KINDS = ("linear_attention", "conv")


def _mixer_kinds(text_config: PreTrainedConfig) -> set[str]:
    return set(getattr(text_config, "layer_types", None) or ()) & set(_MIXER_KINDS)


def packed_document_kwargs(text_config: PreTrainedConfig, lengths: Sequence[int]) -> dict[str, torch.Tensor]:
    """What a row packing documents of ``lengths`` also hands a model whose text layers include Gated DeltaNet or
    short-convolution mixers: the documents' boundaries (``cu_seq_lens_q``, ``cu_seq_lens_k``), which those mixers
    read where attention layers read the positions. Nothing for a text model without them."""
    if not _mixer_kinds(text_config):
        return {}
    cu_seqlens = torch.tensor([0, *lengths]).cumsum(0).to(torch.int32)
    return {"cu_seq_lens_q": cu_seqlens, "cu_seq_lens_k": cu_seqlens}


def packed_document_ops(text_config: PreTrainedConfig) -> OpsConfig:
    """The slots a packed row runs on: eager, and for the mixers' slots the chunked_delta kernels, since upstream's
    torch fallbacks ignore ``cu_seq_lens_q`` (docs/design.md, "Where the code departs from the design contract"):
    both of its slots for a Gated DeltaNet hybrid, the conv alone for a short convolution's."""
    kinds = _mixer_kinds(text_config)
    if "linear_attention" in kinds:
        return CHUNKED_DELTA
    return OpsConfig({"causal_conv1d": "chunked_delta"}) if kinds else OpsConfig()


def decode_logits(model: Any, batch: dict[str, torch.Tensor], next_tokens: torch.Tensor) -> torch.Tensor:
    """Logits of one cached decode step after a prefill of ``batch``."""
    with torch.no_grad():
        prefill = model(**batch, use_cache=True)
        mask = torch.cat([batch["attention_mask"], torch.ones_like(next_tokens)], dim=1)
        step = model(input_ids=next_tokens, attention_mask=mask, cache=prefill.cache, use_cache=True)
    return step.logits


def decode_logits_with_reference(
    model: Any, slot: str, batch: dict[str, torch.Tensor], next_tokens: torch.Tensor
) -> tuple[torch.Tensor, int]:
    """:func:`decode_logits` with ``slot``'s reference kernel bound alone, and how often it was called."""
    calls = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return reference_kernel(slot)(*args, **kwargs)

    with bound_ops(OpsConfig()):
        SLOTS[slot].bind(counted, name=f"reference.{slot}")
        logits = decode_logits(model, batch, next_tokens)
    return logits, calls


def check_cached_decode_step(declared: Any, backend: str, slot: str) -> None:
    """Prefill then one token from the cache: ``slot``'s reference kernel, bound alone on the generated model, gives
    upstream's logits, and is called."""
    config = declared.config()
    cls = declared.causal_lm
    pair = build_pair(
        config,
        get_model_class(declared.model_type, cls, use_hf=True),
        get_model_class(declared.model_type, cls, backend),
    )
    pair.upstream.eval(), pair.generated.eval()
    batch = causal_lm_batch(config, batch_size=2, seq_len=6)
    del batch["labels"]
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    next_tokens = batch["input_ids"][:, :1].flip(0)
    expected = decode_logits(pair.upstream, batch, next_tokens)
    actual, calls = decode_logits_with_reference(pair.generated, slot, batch, next_tokens)
    assert calls > 0
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def check_packed_documents(declared: Any, backend: str, mixer_class: str, ops: OpsConfig) -> None:
    """The generated model's ``mixer_class``, called as its decoder layer calls it (the reader checked that the
    layer hands it the batch's ``**kwargs``) on two packed documents with ``cu_seq_lens_q`` and ``ops`` bound, gives
    each document the outputs it has alone.

    Compared against each output's own norm: a tiny short-convolution mixer's outputs are products of three small
    projections (about 5e-5), below any fixed ``atol`` a leak from the other document would exceed.
    """
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = build_model(declared.config(), architecture=declared.causal_lm, backend=backend).eval()
    mixer = next(module for module in model.modules() if type(module).__name__ == mixer_class)
    hidden = torch.randn(1, 12, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    cu_seqlens = torch.tensor([0, 5, 12], dtype=torch.int32)
    with bound_ops(ops), torch.no_grad():
        packed = mixer(hidden_states=hidden, cu_seq_lens_q=cu_seqlens, cu_seq_lens_k=cu_seqlens)
        first, second = mixer(hidden_states=hidden[:, :5]), mixer(hidden_states=hidden[:, 5:])
    assert_within("the first document", first, packed[:, :5], _DOCUMENT_TOLERANCE)
    assert_within("the second document", second, packed[:, 5:], _DOCUMENT_TOLERANCE)


def decode_step_reason(slot: str, test: str) -> str:
    """Why a training step never calls a decode-step slot, and which test binds it instead."""
    return f"{slot} is called only from a cache, one token at a time, never by a training step: {test} binds it"


class GatedDeltaNetSuite:
    """Decode-step and packed-document checks of a Gated DeltaNet hybrid; subclasses also derive a parity suite."""

    model: ClassVar[Any]
    #: The mixer class that hands packed documents' boundaries on to the delta rule (the fit's ``packed``), or None.
    packed_mixer: ClassVar[str | None] = None

    def _unreachable(self, slot: str) -> str | None:
        if slot in DECODE_SLOTS:
            return decode_step_reason(slot, "test_reference_decode_kernel_matches_upstreams_cached_decode_step")
        return super()._unreachable(slot)  # type: ignore[misc]

    @pytest.mark.parametrize("slot", DECODE_SLOTS)
    def test_reference_decode_kernel_matches_upstreams_cached_decode_step(self, backend: str, slot: str) -> None:
        """Prefill then one token from the cache: the decode-step slot's reference kernel, bound alone and called."""
        check_cached_decode_step(self.model, backend, slot)

    def test_packed_documents_through_the_chunked_delta_kernels_give_each_documents_own_outputs(
        self, backend: str
    ) -> None:
        """With cu_seq_lens_q, each document's conv window and delta-rule state start afresh in the mixer."""
        if self.packed_mixer is None:
            pytest.skip(f"upstream's {self.model.causal_lm} hands no cu_seq_lens_q to its delta rule")
        check_packed_documents(self.model, backend, self.packed_mixer, CHUNKED_DELTA)
