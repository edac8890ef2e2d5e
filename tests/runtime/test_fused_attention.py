"""``fused_attention``: sdpa through torch's fused CPU kernel for unequal head widths, sinks and sparse indices.

Specification: plain attention is sdpa itself; unequal widths (values narrower, as in MLA, or wider) give
sdpa's output and gradients within fp32 rounding under every mask kind; learned sinks give upstream's
eager sink attention (gpt_oss, DeepSeek-V4) with the sinks' gradient; a sparse ``indices`` selection
masks every other key; the fused CPU kernel runs where upstream's sdpa runs the math path; and the zoo's
models built with it train like upstream's eager attention (DeepSeek-V3 also like upstream's sdpa;
GLM-MoE-DSA's upstream sdpa path loses its causal and sparse masks, see models/attention.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as sink_eager_attention

from modelgraft import models
from modelgraft.models import MODEL_CONFIG_REGISTRY
from modelgraft.models.attention import (
    FUSED_ATTENTION,
    UnsupportedAttentionError,
    fused_attention,
    register_fused_attention,
)
from modelgraft.models.loader import get_model_class
from modelgraft.models.testing import assert_step_parity, build_pair, causal_lm_batch, run_step
from modelgraft.models.testing.parity import tolerance_for
from modelgraft.models.testing.preloaded_python import run_code
from modelgraft.models.testing.tiny import tiny_config_for

REPO_ROOT = Path(__file__).resolve().parents[2]
BATCH, HEADS, LENGTH = 2, 4, 24
FUSED_CPU_KERNEL = "aten::_scaled_dot_product_flash_attention_for_cpu"


class _Attention(nn.Module):
    """What transformers' attention functions read from the calling module."""

    is_causal = True
    num_key_value_groups = 1


class _SinkAttention(nn.Module):
    """A module with per-head sinks, as gpt_oss's and DeepSeek-V4's attention hold them."""

    is_causal = True

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.sinks = nn.Parameter(torch.linspace(-1.0, 2.0, HEADS))


def _inputs(query_width: int, value_width: int, *, seed: int = 0, kv_heads: int = HEADS) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(seed)

    def tensor(heads: int, width: int) -> torch.Tensor:
        return torch.randn(BATCH, heads, LENGTH, width, generator=generator).requires_grad_(True)

    return tensor(HEADS, query_width), tensor(kv_heads, query_width), tensor(kv_heads, value_width)


def _masks() -> dict[str, torch.Tensor | None]:
    causal = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()
    padded = causal[None, None].repeat(BATCH, 1, 1, 1)
    padded[1, :, :, :5] = False  # row 1 left-padded by five tokens
    padded[1, :, :5, 0] = True  # padding queries see one key, so no row is empty
    additive = torch.zeros(BATCH, 1, LENGTH, LENGTH).masked_fill(~padded, torch.finfo(torch.float32).min)
    return {"causal (no mask)": None, "boolean": padded, "additive": additive}


def _additive(mask: torch.Tensor | None) -> torch.Tensor:
    """The additive form of one of :func:`_masks` (eager attention adds its mask)."""
    if mask is None:
        mask = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()[None, None]
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)


def _forward_backward(function, query, key, value, mask, *, module=None, **kwargs) -> tuple[torch.Tensor, ...]:
    module = _Attention() if module is None else module
    for tensor in (query, key, value, *module.parameters()):
        tensor.grad = None
    output, _ = function(module, query, key, value, mask, **kwargs)
    output.backward(torch.linspace(-1, 1, output.numel()).view_as(output))
    return output.detach(), *(t.grad.clone() for t in (query, key, value, *module.parameters()))


def test_equal_widths_are_sdpa_itself():
    query, key, value = _inputs(32, 32)
    expected, _ = sdpa_attention_forward(_Attention(), query, key, value, None)
    actual, _ = fused_attention(_Attention(), query, key, value, None)
    assert torch.equal(actual, expected)


@pytest.mark.parametrize("mask_kind", list(_masks()))
@pytest.mark.parametrize(("query_width", "value_width"), [(48, 32), (32, 48)], ids=["narrow values", "wide values"])
def test_unequal_widths_match_sdpa_with_gradients(mask_kind, query_width, value_width):
    mask = _masks()[mask_kind]
    inputs = _inputs(query_width, value_width)
    expected = _forward_backward(sdpa_attention_forward, *inputs, mask)
    actual = _forward_backward(fused_attention, *inputs, mask)
    for name, want, got in zip(("output", "query grad", "key grad", "value grad"), expected, actual, strict=True):
        assert got.shape == want.shape, name
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("mask_kind", list(_masks()))
@pytest.mark.parametrize("groups", [1, 2], ids=["one kv head per head", "two heads per kv head"])
def test_sinks_match_upstream_eager_sink_attention_with_gradients(mask_kind, groups):
    mask = _masks()[mask_kind]
    inputs = _inputs(32, 32, kv_heads=HEADS // groups)
    module = _SinkAttention(groups)
    expected = _forward_backward(sink_eager_attention, *inputs, _additive(mask), module=module, scaling=0.2)
    actual = _forward_backward(fused_attention, *inputs, mask, module=module, scaling=0.2, s_aux=module.sinks)
    names = ("output", "query grad", "key grad", "value grad", "sinks grad")
    for name, want, got in zip(names, expected, actual, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)


def test_sinks_with_unequal_widths_match_upstream_eager_sink_attention():
    inputs = _inputs(48, 32)
    module = _SinkAttention(1)
    expected = _forward_backward(sink_eager_attention, *inputs, _additive(None), module=module, scaling=0.2)
    actual = _forward_backward(fused_attention, *inputs, None, module=module, scaling=0.2, s_aux=module.sinks)
    for want, got in zip(expected, actual, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _hand_sparse_mask(indices: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The additive mask of ``indices`` on top of ``mask`` (causal when None), one entry at a time."""
    allowed = torch.zeros(BATCH, 1, LENGTH, LENGTH, dtype=torch.bool)
    for batch in range(BATCH):
        for query in range(LENGTH):
            for key in indices[batch, query].tolist():
                allowed[batch, 0, query, key] = True
    if mask is None:
        allowed &= torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()
        return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    if mask.dtype == torch.bool:
        return mask & allowed
    return mask.masked_fill(~allowed, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("mask_kind", list(_masks()))
def test_sparse_indices_mask_every_other_key(mask_kind):
    mask = _masks()[mask_kind]
    generator = torch.Generator().manual_seed(1)
    indices = torch.rand(BATCH, LENGTH, LENGTH, generator=generator).topk(6, dim=-1).indices.to(torch.int32)
    # Every query keeps itself and key 0, so no row is masked whole (kernels disagree on such rows).
    indices[..., 0] = torch.arange(LENGTH, dtype=torch.int32)
    indices[..., 1] = 0
    inputs = _inputs(48, 32)
    expected = _forward_backward(sdpa_attention_forward, *inputs, _hand_sparse_mask(indices, mask))
    actual = _forward_backward(fused_attention, *inputs, mask, indices=indices)
    for want, got in zip(expected, actual, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_explicit_scaling_is_kept():
    inputs = _inputs(48, 32)
    expected = _forward_backward(sdpa_attention_forward, *inputs, None, scaling=0.3)
    actual = _forward_backward(fused_attention, *inputs, None, scaling=0.3)
    for want, got in zip(expected, actual, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("argument", ["softcap", "block_indices"])
def test_arguments_the_fused_kernel_cannot_apply_are_refused(argument):
    query, key, value = _inputs(32, 32)
    with pytest.raises(UnsupportedAttentionError, match=f"passes {argument}.*attn_implementation='eager'"):
        fused_attention(_Attention(), query, key, value, None, **{argument: 30.0})


def test_queries_and_keys_of_different_widths_are_refused():
    query, _, value = _inputs(48, 32)
    key = torch.randn(BATCH, HEADS, LENGTH, 40)
    with pytest.raises(ValueError, match="queries \\(48\\) and keys \\(40\\)"):
        fused_attention(_Attention(), query, key, value, None)


def _ran_fused_kernel(function, query_width: int, value_width: int, **kwargs) -> bool:
    query, key, value = _inputs(query_width, value_width)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        output, _ = function(_Attention(), query, key, value, None, **kwargs)
        output.sum().backward()
    return any(event.key == FUSED_CPU_KERNEL for event in prof.key_averages())


def test_unequal_widths_run_the_fused_cpu_kernel_where_sdpa_does_not():
    assert not _ran_fused_kernel(sdpa_attention_forward, 48, 32)
    assert _ran_fused_kernel(fused_attention, 48, 32)


def test_sinks_run_the_fused_cpu_kernel():
    assert _ran_fused_kernel(fused_attention, 32, 32, s_aux=torch.zeros(HEADS, requires_grad=True))


def _run_fresh(code: str) -> None:
    """``code`` in a fresh interpreter, where nothing has registered ``fused_attention`` yet."""
    prelude = (
        "from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS\n"
        "from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS\n"
        "def registered():\n"
        "    return 'fused_attention' in ALL_ATTENTION_FUNCTIONS, 'fused_attention' in ALL_MASK_ATTENTION_FUNCTIONS\n"
    )
    result = run_code(prelude + code, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr


#: A generated module and a tiny model of it, built with upstream's eager attention (fresh interpreter).
_TINY_QWEN3 = (
    "from transformers import Qwen3Config\n"
    "from modelgraft.models.qwen3.generated.patched_modeling_qwen3_gpu import Qwen3ForCausalLM\n"
    "from modelgraft.models.testing.tiny import tiny_config_for\n"
    "model = Qwen3ForCausalLM(tiny_config_for(Qwen3Config))\n"
)


def test_importing_a_generated_module_registers_no_attention_implementation():
    _run_fresh(
        "import modelgraft.models.qwen3_moe.generated.patched_modeling_qwen3_moe_gpu\n"
        "assert registered() == (False, False), registered()\n"
    )


def test_from_pretrained_asking_for_fused_attention_registers_it_and_selects_it(tmp_path):
    _run_fresh(
        _TINY_QWEN3 + f"model.save_pretrained({str(tmp_path)!r})\n"
        "assert registered() == (False, False), registered()\n"
        f"loaded = Qwen3ForCausalLM.from_pretrained({str(tmp_path)!r}, attn_implementation='fused_attention')\n"
        "assert registered() == (True, True), registered()\n"
        "assert loaded.config._attn_implementation == 'fused_attention'\n"
    )


def test_set_attn_implementation_to_fused_attention_registers_it_and_runs_it():
    _run_fresh(
        _TINY_QWEN3 + "import torch\n"
        "model.set_attn_implementation('fused_attention')\n"
        "assert registered() == (True, True), registered()\n"
        "model(input_ids=torch.tensor([[1, 2, 3]]))\n"
    )


def test_registration_makes_the_name_selectable_by_from_pretrained(tmp_path):
    assert register_fused_attention() == FUSED_ATTENTION
    config = tiny_config_for(MODEL_CONFIG_REGISTRY["deepseek_v3"])
    generated_cls = get_model_class("deepseek_v3", "DeepseekV3ForCausalLM")
    generated_cls(config).save_pretrained(tmp_path)
    loaded = generated_cls.from_pretrained(tmp_path, attn_implementation=FUSED_ATTENTION)
    assert loaded.config._attn_implementation == FUSED_ATTENTION


def _step_parity(
    model_type: str, upstream_attention: str, dtype: torch.dtype = torch.float32, **sizes: object
) -> None:
    architecture = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    upstream_cls = get_model_class(model_type, architecture, use_hf=True)
    # the causal LM's own config class: a VLM's text-only ForCausalLM (qwen3_5) takes its text config
    config = tiny_config_for(upstream_cls.config_class, attn_implementation=upstream_attention, **sizes)
    pair = build_pair(
        config,
        upstream_cls,
        get_model_class(model_type, architecture),
        dtype=dtype,
    )
    pair.generated.set_attn_implementation(FUSED_ATTENTION)
    batch = causal_lm_batch(config, batch_size=2, seq_len=16)
    assert_step_parity(
        run_step(pair.upstream, batch),
        run_step(pair.generated, batch),
        tolerance=tolerance_for(dtype, kernels=True),
        logits="close",
    )


def _registered_causal_lms() -> list[str]:
    return sorted(m for m in models.MODELING_REGISTRY if m in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


@pytest.mark.parametrize("model_type", _registered_causal_lms())
def test_every_zoo_model_trains_like_upstream_eager_attention(model_type):
    try:
        _step_parity(model_type, "eager")
    except UnsupportedAttentionError as refusal:  # e.g. a scaffolded Gemma-2: soft-capping, refused, not dropped
        pytest.skip(f"{model_type} cannot run fused_attention: {refusal}")


#: bf16 sizes that leave no top-k to flip: one bf16 rounding apart, a router may pick other experts, and the
#: logits then differ by far more than attention's rounding. DeepSeek-V3 with every layer dense; gpt_oss
#: with every expert selected (its tiny config has 7).
BF16_NO_ROUTING = {
    "deepseek_v3": {"first_k_dense_replace": 8},
    "gpt_oss": {"num_local_experts": 4, "num_experts_per_tok": 4, "experts_implementation": "eager"},
}


@pytest.mark.parametrize("model_type", list(BF16_NO_ROUTING), ids=["latent attention", "sinks"])
def test_bf16_training_matches_upstream_eager_within_the_bf16_kernel_tolerance(model_type):
    _step_parity(model_type, "eager", torch.bfloat16, **BF16_NO_ROUTING[model_type])


def test_deepseek_v3_trains_like_upstream_sdpa():
    _step_parity("deepseek_v3", "sdpa")
