"""Each eager reference kernel reproduces the upstream transformers function it specifies, bit for bit."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.activations import ACT2FN
from transformers.loss.loss_utils import ForCausalLMLoss, ForSequenceClassificationLoss
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from modelgraft.models.ops.kernels import eager

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_without_offset_matches_llama_rms_norm(dtype: torch.dtype) -> None:
    norm = LlamaRMSNorm(48, eps=1e-5).to(dtype)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(3, 7, 48, dtype=dtype)
    assert torch.equal(eager.rms_norm(x, norm.weight, 1e-5), norm(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_with_offset_one_matches_gemma3_rms_norm(dtype: torch.dtype) -> None:
    norm = Gemma3RMSNorm(48, eps=1e-6).to(dtype)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(3, 7, 48, dtype=dtype)
    assert torch.equal(eager.rms_norm(x, norm.weight, 1e-6, offset=1.0), norm(x))


@pytest.mark.parametrize("activation", ["silu", "gelu_pytorch_tanh", "gelu"])
def test_glu_activation_matches_act_times_up(activation: str) -> None:
    gate, up = torch.randn(2, 5, 80), torch.randn(2, 5, 80)
    assert torch.equal(eager.glu_activation(gate, up, activation), ACT2FN[activation](gate) * up)


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_rope_matches_apply_rotary_pos_emb(unsqueeze_dim: int) -> None:
    heads_axis = (2, 6, 11, 16) if unsqueeze_dim == 1 else (2, 11, 6, 16)
    q = torch.randn(heads_axis)
    k = torch.randn(heads_axis[:unsqueeze_dim] + (3,) + heads_axis[unsqueeze_dim + 1 :])
    cos, sin = torch.randn(2, 11, 16), torch.randn(2, 11, 16)
    expected = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    actual = eager.rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def _labels(shape: tuple[int, int], vocab: int, ignore_index: int = -100) -> torch.Tensor:
    labels = torch.randint(0, vocab, shape)
    labels[0, :3] = ignore_index
    return labels


@pytest.mark.parametrize(
    "loss_kwargs",
    [{}, {"num_items_in_batch": 9}, {"num_items_in_batch": torch.tensor(9)}, {"ignore_index": 7}],
    ids=["mean", "num_items_int", "num_items_tensor", "other_ignore_index"],
)
def test_causal_lm_loss_matches_for_causal_lm_loss(loss_kwargs: dict) -> None:
    hidden, weight = torch.randn(2, 9, 16), torch.randn(131, 16)
    labels = _labels((2, 9), 131, loss_kwargs.get("ignore_index", -100))
    logits = torch.nn.functional.linear(hidden, weight)
    loss, returned_logits = eager.causal_lm_loss(hidden, weight, labels, vocab_size=131, **loss_kwargs)
    assert torch.equal(returned_logits, logits)
    assert torch.equal(loss, ForCausalLMLoss(logits, labels, vocab_size=131, **loss_kwargs))


def test_causal_lm_loss_uses_given_shift_labels_as_is() -> None:
    hidden, weight = torch.randn(2, 9, 16), torch.randn(131, 16)
    shift_labels = _labels((2, 9), 131)
    logits = torch.nn.functional.linear(hidden, weight)
    loss, _ = eager.causal_lm_loss(hidden, weight, None, vocab_size=131, shift_labels=shift_labels)
    assert torch.equal(loss, ForCausalLMLoss(logits, None, vocab_size=131, shift_labels=shift_labels))


def test_causal_lm_loss_softcaps_logits_like_gemma() -> None:
    hidden, weight = torch.randn(2, 9, 16), torch.randn(131, 16)
    labels = _labels((2, 9), 131)
    logits = torch.tanh(torch.nn.functional.linear(hidden, weight) / 5.0) * 5.0
    loss, returned_logits = eager.causal_lm_loss(hidden, weight, labels, vocab_size=131, final_logit_softcapping=5.0)
    assert torch.equal(returned_logits, logits)
    assert torch.equal(loss, ForCausalLMLoss(logits, labels, vocab_size=131))


def test_causal_lm_loss_softcaps_fp32_logits_when_asked() -> None:
    hidden, weight = torch.randn(2, 9, 16, dtype=torch.bfloat16), torch.randn(131, 16, dtype=torch.bfloat16)
    labels = _labels((2, 9), 131)
    logits = torch.tanh(torch.nn.functional.linear(hidden, weight).float() / 5.0) * 5.0
    loss, returned_logits = eager.causal_lm_loss(
        hidden, weight, labels, vocab_size=131, final_logit_softcapping=5.0, softcap_in_fp32=True
    )
    assert returned_logits.dtype == torch.float32
    assert torch.equal(returned_logits, logits)
    assert torch.equal(loss, ForCausalLMLoss(logits, labels, vocab_size=131))


@pytest.mark.parametrize(
    ("num_labels", "problem_type", "labels"),
    [
        (1, None, torch.randn(4)),
        (3, None, torch.tensor([0, 2, 1, 2])),
        (3, None, torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])),
        (3, "regression", torch.randn(4, 3)),
    ],
    ids=["regression_inferred", "single_label_inferred", "multi_label_inferred", "regression_multi_output"],
)
def test_sequence_classification_loss_matches_upstream(num_labels: int, problem_type: str | None, labels) -> None:
    pooled = torch.randn(4, num_labels)
    logits = torch.randn(4, 6, num_labels)
    upstream_config = LlamaConfig(num_labels=num_labels, problem_type=problem_type)
    our_config = LlamaConfig(num_labels=num_labels, problem_type=problem_type)
    expected = ForSequenceClassificationLoss(labels=labels, pooled_logits=pooled, config=upstream_config)
    actual = eager.sequence_classification_loss(logits, labels, pooled, our_config)
    assert torch.equal(actual, expected)
    assert our_config.problem_type == upstream_config.problem_type
