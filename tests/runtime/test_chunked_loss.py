"""The chunked fused linear-cross-entropy kernel: upstream's loss and gradients, without full logits."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers.loss.loss_utils import ForCausalLMLoss

from modelgraft.models.ops import OpsConfig, bound_ops, causal_lm_loss_slot
from modelgraft.models.ops.kernels import chunked_loss, eager

#: fp32; the kernel sums chunk by chunk, so results differ from upstream only by reassociation.
RTOL, ATOL = 1e-5, 1e-6
#: bf16 projections round differently once per chunk and once per gradient cast.
BF16_RTOL, BF16_ATOL = 2e-2, 2e-2

BATCH, SEQ, HIDDEN, VOCAB = 3, 13, 16, 211


class LargestTensorProbe(TorchDispatchMode):
    """Records the element count of the largest new tensor any aten op allocates while active.

    Outputs that share storage with an input (views, in-place ops) allocate nothing and are skipped.
    """

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {
            leaf.untyped_storage().data_ptr() for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)
        }
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and leaf.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, leaf.numel())
        return out


def _inputs(dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(BATCH, SEQ, HIDDEN, generator=generator).to(dtype).requires_grad_()
    weight = torch.randn(VOCAB, HIDDEN, generator=generator).to(dtype).requires_grad_()
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    labels[0, :4] = -100
    labels[2, -3:] = -100
    return hidden, weight, labels


def _upstream(hidden, weight, labels, softcap: float | None = None, **loss_kwargs: Any):
    logits = torch.nn.functional.linear(hidden, weight)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    loss = ForCausalLMLoss(logits, labels, vocab_size=VOCAB, **loss_kwargs)
    return (loss, *torch.autograd.grad(loss, (hidden, weight)))


def _chunked(hidden, weight, labels, softcap: float | None = None, chunk_size: int = 5, **loss_kwargs: Any):
    loss, logits = chunked_loss.causal_lm_loss(
        hidden, weight, labels, vocab_size=VOCAB, final_logit_softcapping=softcap, chunk_size=chunk_size, **loss_kwargs
    )
    assert logits is None
    return (loss, *torch.autograd.grad(loss, (hidden, weight)))


def _assert_all_close(actual, expected, rtol: float = RTOL, atol: float = ATOL) -> None:
    for name, a, e in zip(("loss", "grad of hidden_states", "grad of lm_head_weight"), actual, expected):
        assert torch.allclose(a.float(), e.float(), rtol=rtol, atol=atol), f"{name}: max |diff| {(a - e).abs().max()}"


@pytest.mark.parametrize("chunk_size", [1, 5, 13, 39, 256], ids=lambda c: f"chunk{c}")
def test_matches_upstream_loss_and_grads_with_ignored_tokens(chunk_size: int) -> None:
    hidden, weight, labels = _inputs()
    _assert_all_close(_chunked(hidden, weight, labels, chunk_size=chunk_size), _upstream(hidden, weight, labels))


def test_matches_upstream_with_given_shift_labels() -> None:
    hidden, weight, shift_labels = _inputs()
    expected = _upstream(hidden, weight, None, shift_labels=shift_labels)
    _assert_all_close(_chunked(hidden, weight, None, shift_labels=shift_labels), expected)


@pytest.mark.parametrize("num_items", [17, torch.tensor(17)], ids=["int", "tensor"])
def test_matches_upstream_with_num_items_in_batch(num_items: int | torch.Tensor) -> None:
    hidden, weight, labels = _inputs()
    expected = _upstream(hidden, weight, labels, num_items_in_batch=num_items)
    _assert_all_close(_chunked(hidden, weight, labels, num_items_in_batch=num_items), expected)


def test_matches_upstream_with_another_ignore_index() -> None:
    hidden, weight, labels = _inputs()
    labels[labels == -100] = 3
    expected = _upstream(hidden, weight, labels, ignore_index=3)
    _assert_all_close(_chunked(hidden, weight, labels, ignore_index=3), expected)


def test_matches_upstream_with_final_logit_softcapping() -> None:
    hidden, weight, labels = _inputs()
    _assert_all_close(_chunked(hidden, weight, labels, softcap=2.5), _upstream(hidden, weight, labels, softcap=2.5))


def test_matches_upstream_in_bfloat16() -> None:
    hidden, weight, labels = _inputs(torch.bfloat16)
    _assert_all_close(
        _chunked(hidden, weight, labels), _upstream(hidden, weight, labels), rtol=BF16_RTOL, atol=BF16_ATOL
    )


def test_all_targets_ignored_gives_nan_like_upstream() -> None:
    hidden, weight, labels = _inputs()
    labels.fill_(-100)
    loss, _ = chunked_loss.causal_lm_loss(hidden, weight, labels, vocab_size=VOCAB)
    expected = ForCausalLMLoss(torch.nn.functional.linear(hidden, weight), labels, vocab_size=VOCAB)
    assert torch.isnan(expected) and torch.isnan(loss)


def test_frozen_lm_head_gets_no_gradient() -> None:
    hidden, weight, labels = _inputs()
    weight.requires_grad_(False)
    loss, _ = chunked_loss.causal_lm_loss(hidden, weight, labels, vocab_size=VOCAB)
    loss.backward()
    assert weight.grad is None
    expected = _upstream(hidden.detach().requires_grad_(), weight.requires_grad_(), labels)
    assert torch.allclose(hidden.grad, expected[1], rtol=RTOL, atol=ATOL)


def test_no_grad_mode_computes_the_loss_only() -> None:
    hidden, weight, labels = _inputs()
    with torch.no_grad(), LargestTensorProbe() as probe:
        loss, _ = chunked_loss.causal_lm_loss(hidden, weight, labels, vocab_size=VOCAB, chunk_size=5)
    assert not loss.requires_grad
    assert torch.allclose(loss, _upstream(hidden, weight, labels)[0], rtol=RTOL, atol=ATOL)
    assert probe.largest < VOCAB * HIDDEN  # no weight-gradient buffer was allocated


def _large_vocab_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # rows * vocab (4 * 96 * 1031) dwarfs chunk * vocab (32 * 1031) and every other tensor (1031 * 8).
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(4, 96, 8, generator=generator, requires_grad=True)
    weight = torch.randn(1031, 8, generator=generator, requires_grad=True)
    labels = torch.randint(0, 1031, (4, 96), generator=generator)
    return hidden, weight, labels


def test_never_materializes_full_logits_in_forward_or_backward() -> None:
    hidden, weight, labels = _large_vocab_inputs()
    with LargestTensorProbe() as probe:
        loss, _ = chunked_loss.causal_lm_loss(hidden, weight, labels, vocab_size=1031, chunk_size=32)
        loss.backward()
    assert probe.largest <= 32 * 1031 < labels.numel() * 1031


def test_the_probe_sees_full_logits_in_the_eager_loss() -> None:
    hidden, weight, labels = _large_vocab_inputs()
    with LargestTensorProbe() as probe:
        loss, _ = eager.causal_lm_loss(hidden, weight, labels, vocab_size=1031)
        loss.backward()
    assert probe.largest >= labels.numel() * 1031


def test_saves_no_logits_sized_tensor_for_backward() -> None:
    hidden, weight, labels = _large_vocab_inputs()
    saved: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss, _ = chunked_loss.causal_lm_loss(hidden, weight, labels, vocab_size=1031, chunk_size=32)
    loss.backward()
    assert saved and max(saved) < labels.numel() * 1031


def test_chunk_size_option_from_ops_config_reaches_the_kernel() -> None:
    hidden, weight, labels = _large_vocab_inputs()
    ops = OpsConfig({"causal_lm_loss": "chunked"}, kernel_options={"causal_lm_loss": {"chunk_size": 16}})
    with bound_ops(ops), LargestTensorProbe() as probe:
        _, logits = causal_lm_loss_slot(hidden, weight, labels, vocab_size=1031)
    assert logits is None
    assert probe.largest == 16 * 1031


def test_vocab_size_must_match_the_lm_head() -> None:
    hidden, weight, labels = _inputs()
    with pytest.raises(ValueError, match="vocab_size is 100"):
        chunked_loss.causal_lm_loss(hidden, weight, labels, vocab_size=100)


def test_hidden_states_and_labels_must_cover_the_same_positions() -> None:
    hidden, weight, labels = _inputs()
    with pytest.raises(ValueError, match="same positions"):
        chunked_loss.causal_lm_loss(hidden[:, -1:], weight, labels, vocab_size=VOCAB)


def test_chunk_size_must_be_positive() -> None:
    hidden, weight, labels = _inputs()
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_loss.causal_lm_loss(hidden, weight, labels, vocab_size=VOCAB, chunk_size=0)


def test_chunked_loss_with_an_lm_head_bias_matches_eager_with_gradients() -> None:
    """phi and codegen project with a bias: the chunked kernel adds it and returns its gradient."""
    from modelgraft.models.ops.kernels import chunked_loss, eager

    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 9, 12, generator=generator, requires_grad=True)
    weight = torch.randn(37, 12, generator=generator, requires_grad=True)
    bias = torch.randn(37, generator=generator, requires_grad=True)
    labels = torch.randint(0, 37, (2, 9), generator=generator)
    labels[0, :3] = -100
    expected, _ = eager.causal_lm_loss(hidden, weight, labels, vocab_size=37, lm_head_bias=bias)
    want = torch.autograd.grad(expected, (hidden, weight, bias))
    actual, logits = chunked_loss.causal_lm_loss(
        hidden, weight, labels, vocab_size=37, lm_head_bias=bias, chunk_size=5
    )
    got = torch.autograd.grad(actual, (hidden, weight, bias))
    assert logits is None
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
