"""The rope_vision reference kernel's (tensor, freqs) form against Qwen2.5-Omni's vision RoPE, which uses that form.

Upstream takes cos and sin of the angles in their own dtype and only then goes to fp32: a bf16 model's angles are
bf16 (its rotary buffer is cast with the model), so the kernel must round them where upstream does.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import apply_rotary_pos_emb_vision

from modelgraft.models.ops.kernels.eager import rope_vision


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_tensor_and_freqs_form_is_qwen2_5_omnis_vision_rope_bit_for_bit(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(0)
    tensor = torch.randn(1, 7, 3, 10, generator=generator).to(dtype)
    freqs = (torch.randn(7, 5, generator=generator) * 20).to(dtype)  # large angles: bf16 rounding shows
    actual = rope_vision(tensor, freqs)
    assert actual.dtype == dtype
    assert torch.equal(actual, apply_rotary_pos_emb_vision(tensor, freqs))
