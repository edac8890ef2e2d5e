"""What a row packing documents hands a Gated DeltaNet or short-convolution hybrid besides its positions, and the
kernels it runs on: the documents' boundaries and the chunked_delta family, which keeps them apart where upstream's
torch fallback does not (docs/design.md, "Where the code departs from the design contract")."""

from __future__ import annotations

import torch
from transformers import Lfm2Config, Qwen3_5TextConfig, Qwen3Config

from modelgraft.models.testing.gated_delta_net_suite import CHUNKED_DELTA, packed_document_kwargs, packed_document_ops

HYBRID = Qwen3_5TextConfig(num_hidden_layers=2, layer_types=["linear_attention", "full_attention"])
SHORT_CONVOLUTION = Lfm2Config(num_hidden_layers=2, layer_types=["conv", "full_attention"])


def test_a_hybrid_text_model_gets_the_documents_boundaries() -> None:
    boundaries = packed_document_kwargs(HYBRID, [5, 3])

    assert torch.equal(boundaries["cu_seq_lens_q"], torch.tensor([0, 5, 8], dtype=torch.int32))
    assert boundaries["cu_seq_lens_k"] is boundaries["cu_seq_lens_q"]


def test_a_hybrid_text_model_packs_on_the_chunked_delta_kernels() -> None:
    assert packed_document_ops(HYBRID) == CHUNKED_DELTA


def test_an_attention_only_text_model_gets_nothing_more_and_eager_slots() -> None:
    config = Qwen3Config(num_hidden_layers=2)

    assert packed_document_kwargs(config, [5, 3]) == {}
    assert not packed_document_ops(config).kernels


def test_a_short_convolution_hybrid_gets_the_documents_boundaries_and_packs_on_the_chunked_delta_conv() -> None:
    boundaries = packed_document_kwargs(SHORT_CONVOLUTION, [5, 3])

    assert torch.equal(boundaries["cu_seq_lens_q"], torch.tensor([0, 5, 8], dtype=torch.int32))
    assert packed_document_ops(SHORT_CONVOLUTION).kernels == {"causal_conv1d": "chunked_delta"}
