"""The rope_vision slot's reference kernel: upstream's vision RoPE bit for bit, in both forms its contract admits."""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import apply_rotary_pos_emb_vision, rotate_half

from modelgraft.models.ops.kernels.eager import rope_vision

SEQ, HEADS, HEAD_DIM = 7, 3, 10


def _qkv(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(SEQ, HEADS, HEAD_DIM, generator=generator).to(dtype)
    k = torch.randn(SEQ, HEADS, HEAD_DIM, generator=generator).to(dtype)
    freqs = torch.randn(SEQ, HEAD_DIM // 2, generator=generator)
    return q, k, freqs


def _one_tensor_form(tensor: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Qwen2-VL's apply_rotary_pos_emb_vision(tensor, freqs) of transformers 4.x, the spec of the two-argument form."""
    orig_dtype = tensor.dtype
    tensor = tensor.float()
    cos = freqs.cos()
    sin = freqs.sin()
    cos = cos.unsqueeze(1).repeat(1, 1, 2).unsqueeze(0).float()
    sin = sin.unsqueeze(1).repeat(1, 1, 2).unsqueeze(0).float()
    output = (tensor * cos) + (rotate_half(tensor) * sin)
    return output.to(orig_dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_four_argument_form_is_upstreams_vision_rope_bit_for_bit(dtype: torch.dtype) -> None:
    q, k, freqs = _qkv(dtype)
    emb = torch.cat((freqs, freqs), dim=-1)
    expected = apply_rotary_pos_emb_vision(q, k, emb.cos(), emb.sin())
    actual = rope_vision(q, k, emb.cos(), emb.sin())
    assert all(torch.equal(a, e) and a.dtype == dtype for a, e in zip(actual, expected, strict=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_tensor_and_freqs_form_is_the_one_tensor_vision_rope(dtype: torch.dtype) -> None:
    q, _, freqs = _qkv(dtype)
    batched = q.unsqueeze(0)  # [batch, seq, heads, head_dim], as that form takes it
    assert torch.equal(rope_vision(batched, freqs), _one_tensor_form(batched, freqs))


def test_other_argument_counts_are_refused() -> None:
    q, k, freqs = _qkv(torch.float32)
    with pytest.raises(TypeError, match=r"\(q, k, cos, sin\) or \(tensor, freqs\)"):
        rope_vision(q, k, freqs)
