"""The rope_vision reference kernel against Qwen2.5-Omni's vision RoPE, in the (q, k, cos, sin) form it takes.

In transformers 5.16 Qwen2.5-Omni's vision tower rotated one tensor by its angles, ``(tensor, freqs)`` (that form
is still the kernel's, held to its spec by ``test_rope_vision_kernel``); in 5.25 its rotary embedding returns cos
and sin and the attention rotates q and k together, as Qwen2-VL's does. Upstream rotates in fp32 and casts back: a
bf16 model's cos and sin are bf16 (computed in the model's dtype), so the kernel must take them as they come.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import apply_rotary_pos_emb_vision

from modelgraft.models.ops.kernels.eager import rope_vision


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_q_k_cos_sin_form_is_qwen2_5_omnis_vision_rope_bit_for_bit(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(7, 3, 10, generator=generator).to(dtype) for _ in range(2))
    angles = torch.randn(7, 10, generator=generator) * 20  # large angles: bf16 rounding of cos and sin shows
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    actual = rope_vision(q, k, cos, sin)
    expected = apply_rotary_pos_emb_vision(q, k, cos, sin)
    assert all(a.dtype == dtype for a in actual)
    assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))
