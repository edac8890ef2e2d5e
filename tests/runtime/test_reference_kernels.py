"""Reference kernels (models.testing.reference): one per slot, and every argument a guard passes matters.

The suites bind each reference kernel alone and compare with upstream; that only catches a guard passing
a wrong argument if the kernel's result depends on that argument. These tests pin that down, argument by
argument, on inputs where the wrong value is the one a buggy guard would pass (the default eps, no mask,
gate and up swapped, the pooled logits scaled, ...).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from modelgraft.models.ops import SLOTS
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing.reference import (
    HEADS,
    NOT_CONSULTED,
    consulted_slots,
    reference_kernel,
    reference_kernels,
)


def _differs(a: object, b: object) -> bool:
    if isinstance(a, tuple):
        return any(_differs(x, y) for x, y in zip(a, b, strict=True))
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    return a.shape != b.shape or not torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-6)


def test_every_slot_has_a_reference_kernel() -> None:
    kernels = reference_kernels(SLOTS)
    assert set(kernels) == set(SLOTS)
    assert all(kernels[slot] is getattr(eager, slot) for slot in SLOTS)


def test_a_slot_without_a_reference_kernel_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(eager, "rope")
    with pytest.raises(LookupError, match=r"'rope' has no reference kernel: add models.ops.kernels.eager.rope"):
        reference_kernel("rope")
    with pytest.raises(LookupError, match="no op slot named 'nope'"):
        reference_kernel("nope")


def test_each_head_consults_every_guarded_slot_but_the_other_heads_losses() -> None:
    guarded = tuple(reversed(SLOTS))  # order of the declaration does not matter
    assert consulted_slots(guarded, "causal_lm") == tuple(s for s in SLOTS if s != "sequence_classification_loss")
    assert "causal_lm_loss" not in consulted_slots(guarded, "sequence_classification")
    assert "load_balancing_loss" not in consulted_slots(guarded, "sequence_classification")
    assert consulted_slots(("rms_norm", "causal_lm_loss"), "sequence_classification") == ("rms_norm",)
    assert set(NOT_CONSULTED) == set(HEADS)


# -- every argument matters ----------------------------------------------------------------------------
def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def test_rms_norm_depends_on_eps_weight_offset_and_cast_order() -> None:
    g = _generator()
    x = torch.randn(3, 5, 48, generator=g) * 0.02  # hidden-state scale: eps is not negligible against it
    weight = 1 + 0.2 * torch.randn(48, generator=g)
    base = eager.rms_norm(x, weight, 3e-5)
    assert _differs(base, eager.rms_norm(x, weight, 1e-6))  # a hard-coded default eps
    assert _differs(base, eager.rms_norm(x, torch.ones(48), 3e-5))  # a dropped weight
    assert _differs(base, eager.rms_norm(x, weight, 3e-5, offset=1.0))  # Gemma's offset where there is none
    xb, wb = x.bfloat16(), weight.bfloat16()
    assert _differs(eager.rms_norm(xb, wb, 3e-5), eager.rms_norm(xb, wb, 3e-5, cast_last=True))  # cast order


def test_activation_and_glu_depend_on_the_activation_and_the_order_of_gate_and_up() -> None:
    g = _generator()
    gate, up = torch.randn(4, 80, generator=g), torch.randn(4, 80, generator=g)
    assert _differs(eager.activation(gate, "silu"), eager.activation(gate, "gelu"))
    base = eager.glu_activation(gate, up, "silu")
    assert _differs(base, eager.glu_activation(up, gate, "silu"))  # gate and up swapped
    assert _differs(base, eager.glu_activation(gate, up, "gelu_pytorch_tanh"))


def test_rope_depends_on_cos_sin_and_unsqueeze_dim() -> None:
    g = _generator()
    q, k = torch.randn(2, 6, 6, 16, generator=g), torch.randn(2, 2, 6, 16, generator=g)
    cos, sin = torch.randn(2, 6, 16, generator=g), torch.randn(2, 6, 16, generator=g)
    base = eager.rope(q, k, cos, sin)
    assert _differs(base, eager.rope(q, k, sin, cos))
    # as many heads as positions, so a wrong unsqueeze_dim broadcasts silently instead of failing
    k6 = torch.randn(2, 6, 6, 16, generator=g)
    assert _differs(eager.rope(q, k6, cos, sin, 1), eager.rope(q, k6, cos, sin, 2))


def test_causal_lm_loss_depends_on_labels_weight_softcap_and_item_count() -> None:
    g = _generator()
    hidden, weight = torch.randn(2, 7, 16, generator=g), torch.randn(31, 16, generator=g)
    labels = torch.randint(0, 31, (2, 7), generator=g)
    labels[0, :2] = -100
    loss, logits = eager.causal_lm_loss(hidden, weight, labels, vocab_size=31)
    other = labels.clone()
    other[1, 3] = (other[1, 3] + 1) % 31
    assert _differs(loss, eager.causal_lm_loss(hidden, weight, other, vocab_size=31)[0])
    assert _differs(loss, eager.causal_lm_loss(hidden, weight / 2, labels, vocab_size=31)[0])
    capped, capped_logits = eager.causal_lm_loss(hidden, weight, labels, vocab_size=31, final_logit_softcapping=2.0)
    assert _differs(loss, capped) and _differs(logits, capped_logits)
    assert _differs(loss, eager.causal_lm_loss(hidden, weight, labels, vocab_size=31, num_items_in_batch=5)[0])


def test_sequence_classification_loss_depends_on_the_pooled_logits_and_labels() -> None:
    g = _generator()
    logits, pooled = torch.randn(4, 11, 5, generator=g), torch.randn(4, 5, generator=g)
    labels = torch.tensor([0, 3, 1, 4])

    def loss(pooled_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        config = SimpleNamespace(num_labels=5, problem_type=None)
        return eager.sequence_classification_loss(logits, labels, pooled_logits, config)

    assert _differs(loss(pooled, labels), loss(pooled * 2, labels))
    assert _differs(loss(pooled, labels), loss(pooled, labels.flip(0)))


def test_moe_experts_depends_on_routing_weights_indices_activation_and_the_gate_up_layout() -> None:
    g = _generator()
    hidden = torch.randn(9, 48, generator=g)
    index = torch.stack([torch.randperm(7, generator=g)[:4] for _ in range(9)])
    weights = torch.softmax(torch.randn(9, 4, generator=g), dim=-1)
    gate_up, down = torch.randn(7, 56, 48, generator=g) * 0.1, torch.randn(7, 48, 28, generator=g) * 0.1
    base = eager.moe_experts(hidden, index, weights, gate_up, down, "silu")
    assert _differs(base, eager.moe_experts(hidden, index, weights.flip(-1), gate_up, down, "silu"))
    assert _differs(base, eager.moe_experts(hidden, (index + 1) % 7, weights, gate_up, down, "silu"))
    assert _differs(base, eager.moe_experts(hidden, index, weights, gate_up, down, "gelu"))
    up_first = torch.cat(gate_up.chunk(2, dim=1)[::-1], dim=1)  # the up rows first: a layout mix-up
    assert _differs(base, eager.moe_experts(hidden, index, weights, up_first, down, "silu"))


def test_load_balancing_loss_depends_on_the_mask_top_k_and_expert_count() -> None:
    g = _generator()
    mask = torch.ones(4, 11, dtype=torch.long)
    mask[-1, 8:] = 0
    router_logits = tuple(torch.randn(44, 7, generator=g) * 2 for _ in range(2))
    base = eager.load_balancing_loss(router_logits, 7, 4, mask)
    assert _differs(base, eager.load_balancing_loss(router_logits, 7, 4, None))  # the mask dropped
    assert _differs(base, eager.load_balancing_loss(router_logits, 7, 2, mask))
    with pytest.raises(RuntimeError):  # an expert count that is not the router's width
        eager.load_balancing_loss(router_logits, 8, 4, mask)
    assert eager.load_balancing_loss((), 7, 4, mask) == 0
