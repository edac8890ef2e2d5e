"""The rope reference kernel recomputes each upstream formulation the reader recognises, bit for bit.

Each case takes upstream's own ``apply_rotary_pos_emb`` from the model that has that body and compares
the reference kernel, with the options the rope guard passes for it, in fp32 and bf16.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from modelgraft.models.ops.kernels import eager

#: model -> (formulation options the guard passes, fraction of head_dim that cos covers)
CASES = {
    "llama": ({}, 1.0),
    "gpt_neox": ({}, 0.5),
    "olmo": ({"cast_back": True}, 1.0),
    "helium": ({"interleaved": True, "repeat_cos": True}, 1.0),
    "glm": ({"interleaved": True, "repeat_cos": True}, 0.5),
    "ernie4_5": ({"interleaved": True, "repeat_cos": True, "upcast_terms": True}, 1.0),
    "cohere": ({"interleaved": True, "upcast": True}, 1.0),
}


def _inputs(dtype: torch.dtype, rotary_fraction: float) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 5, 16, generator=generator).to(dtype)
    k = torch.randn(2, 1, 5, 16, generator=generator).to(dtype)
    rotary = int(16 * rotary_fraction)
    angles = torch.randn(2, 5, rotary, generator=generator)
    return q, k, angles.cos().to(dtype), angles.sin().to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("model", sorted(CASES))
def test_reference_rope_equals_upstreams_formulation(model: str, dtype: torch.dtype) -> None:
    options, fraction = CASES[model]
    upstream = importlib.import_module(f"transformers.models.{model}.modeling_{model}").apply_rotary_pos_emb
    q, k, cos, sin = _inputs(dtype, fraction)
    want_q, want_k = upstream(q, k, cos, sin, unsqueeze_dim=1)
    got_q, got_k = eager.rope(q, k, cos, sin, 1, **options)
    assert got_q.dtype == want_q.dtype and got_k.dtype == want_k.dtype
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)


def test_a_missing_option_changes_the_result() -> None:
    """The guard's options matter: helium's body is not llama's."""
    q, k, cos, sin = _inputs(torch.float32, 1.0)
    upstream = importlib.import_module("transformers.models.helium.modeling_helium").apply_rotary_pos_emb
    want_q, _ = upstream(q, k, cos, sin, unsqueeze_dim=1)
    got_q, _ = eager.rope(q, k, cos, sin, 1)
    assert not torch.allclose(got_q, want_q)


@pytest.mark.parametrize("model", sorted(CASES))
def test_reference_rope_gradients_equal_upstreams_in_bf16(model: str) -> None:
    """Where upstream rounds matters for the backward too (ernie4_5 upcasts each term, cohere the input)."""
    options, fraction = CASES[model]
    upstream = importlib.import_module(f"transformers.models.{model}.modeling_{model}").apply_rotary_pos_emb
    q, k, cos, sin = _inputs(torch.bfloat16, fraction)
    grads = []
    for apply in (lambda *a: upstream(*a, unsqueeze_dim=1), lambda *a: eager.rope(*a, 1, **options)):
        leaf_q, leaf_k = q.clone().requires_grad_(), k.clone().requires_grad_()
        q_embed, k_embed = apply(leaf_q, leaf_k, cos, sin)
        (q_embed.float().sum() * 3 + k_embed.float().pow(2).sum()).backward()
        grads.append((leaf_q.grad, leaf_k.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
