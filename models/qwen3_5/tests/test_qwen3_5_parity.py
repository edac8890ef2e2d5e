"""Qwen3.5: the generated modeling matches upstream transformers on images, videos and text, its Gated DeltaNet
layers included.

Text: 2 layers, a Gated DeltaNet layer then a full-attention one, hidden 72; attention 6 heads of 16 (kv 2), the
rotary half of each head (partial_rotary_factor 0.5: 8 dims, interleaved sections [2, 1, 1]); linear attention 2
key heads of 8 repeated to 4 value heads of 12, a width-4 conv; intermediate 88. Vision: 2 blocks of hidden 40
(2 heads of 20), intermediate 56, patch 4, merge 2, a 6 x 6 learned position grid, no DeepStack.

The decode-step slots (causal_conv1d_update, recurrent_gated_delta_rule) are called only from a cache, one token
at a time: their reference kernels are checked on a prefill then a decode step, not in the training-step suite.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import Qwen3_5Config, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import OpsConfig, bound_ops
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.gated_delta_net_suite import (
    CHUNKED_DELTA,
    DECODE_SLOTS,
    decode_logits,
    decode_logits_with_reference,
)
from modelgraft.models.testing.parity import build_pair, check_parity, eager_slots_on_one_thread
from modelgraft.models.testing.preloaded_python import run_code
from modelgraft.models.testing.vlm_suite import VlmModel, VlmParitySuite

QWEN3_5 = VlmModel(
    model_type="qwen3_5",
    config_class=Qwen3_5Config,
    processor_class=Qwen3VLProcessor,
    image_processor_class=Qwen2VLImageProcessorPil,
    causal_lm="Qwen3_5ForConditionalGeneration",
    base_model="Qwen3_5Model",
    patch_config="modelgraft.models.qwen3_5.qwen3_5_gpu_patch_gen_config",
    text_config={
        "hidden_size": 72,
        "intermediate_size": 88,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_hidden_layers": 2,
        "layer_types": ["linear_attention", "full_attention"],
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 12,
        "linear_conv_kernel_dim": 4,
        "max_position_embeddings": 64,
        "rms_norm_eps": 3e-5,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
    },
    vision_config={
        "hidden_size": 40,
        "intermediate_size": 56,
        "num_heads": 2,
        "depth": 2,
        "out_hidden_size": 72,
        "patch_size": 4,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": 36,
    },
    guarded=(
        "rms_norm",
        "activation",
        "layer_norm",
        "glu_activation",
        "rope",
        "rope_vision",
        "causal_lm_loss",
        "rms_norm_gated",
        "causal_conv1d",
        "chunk_gated_delta_rule",
    ),
)


class TestQwen3_5Parity(VlmParitySuite):
    model = QWEN3_5


def test_the_towers_are_the_generated_classes_not_automodels() -> None:
    """Upstream builds them with AutoModel.from_config, which resolves to upstream's classes; ours must not."""
    module = MODELING_REGISTRY.get_module("qwen3_5", "gpu")
    model = build_model(QWEN3_5.config(), architecture=QWEN3_5.causal_lm)
    assert type(model.model.visual) is module.Qwen3_5VisionModel
    assert type(model.model.language_model) is module.Qwen3_5TextModel


def test_the_tiny_model_has_a_gated_deltanet_layer_and_an_attention_layer() -> None:
    """The parity tests cover both mixers only if the tiny config builds both."""
    module = MODELING_REGISTRY.get_module("qwen3_5", "gpu")
    layers = build_model(QWEN3_5.config(), architecture=QWEN3_5.causal_lm).model.language_model.layers
    assert type(layers[0].linear_attn) is module.Qwen3_5GatedDeltaNet
    assert type(layers[1].self_attn) is module.Qwen3_5Attention


@pytest.mark.parametrize("slot", DECODE_SLOTS)
def test_reference_decode_kernel_matches_upstreams_cached_decode_step(slot: str) -> None:
    """Prefill then one token from the cache: the decode-step slot's reference kernel, bound alone and called."""
    with eager_slots_on_one_thread():
        config = QWEN3_5.config()
        cls = "Qwen3_5ForConditionalGeneration"
        pair = build_pair(config, get_model_class("qwen3_5", cls, use_hf=True), get_model_class("qwen3_5", cls, "gpu"))
        pair.upstream.eval(), pair.generated.eval()
        batch = QWEN3_5.batch([("w1 w2 w3 w4 w5", [], []), ("w6 w7 w8 w9 w10", [], [])], labels=False)
        batch.pop("mm_token_type_ids")
        next_tokens = torch.tensor([[QWEN3_5.token_id("w11")], [QWEN3_5.token_id("w12")]])
        expected = decode_logits(pair.upstream, batch, next_tokens)
        actual, calls = decode_logits_with_reference(pair.generated, slot, batch, next_tokens)
        assert calls > 0
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def test_eager_decode_step_is_upstreams_exactly() -> None:
    with eager_slots_on_one_thread():
        cls = "Qwen3_5ForConditionalGeneration"
        pair = build_pair(
            QWEN3_5.config(), get_model_class("qwen3_5", cls, use_hf=True), get_model_class("qwen3_5", cls, "gpu")
        )
        pair.upstream.eval(), pair.generated.eval()
        batch = QWEN3_5.batch([("w1 w2 w3", [], [])], labels=False)
        batch.pop("mm_token_type_ids")
        next_tokens = torch.tensor([[QWEN3_5.token_id("w4")]])
        assert torch.equal(
            decode_logits(pair.generated, batch, next_tokens), decode_logits(pair.upstream, batch, next_tokens)
        )


#: An interpreter that has imported neither Qwen3.5's modeling nor modelgraft, where fla and causal_conv1d
#: "are installed": stand-ins whose every kernel raises. Upstream's hub decorator picks an installed package up at
#: import time but runs it only on the devices it lists for it (CUDA and the like); the stand-ins are listed for
#: CPU too, as a package that runs on the inputs' device would be, so upstream does switch to them here. Each
#: function of the Gated DeltaNet that upstream decorates so, called on both sides: upstream's (which package ran)
#: and the generated one, compared with upstream's undecorated torch body on the same inputs.
_INSTALLED_STAND_INS = """
import sys, types

def stand_in(*args, **kwargs):
    raise RuntimeError("stand-in kernel called")

def kernel(attribute):
    if attribute.startswith("__"):
        raise AttributeError(attribute)
    return stand_in

for name in ("fla", "causal_conv1d"):
    package = types.ModuleType(name)
    package.__getattr__ = kernel
    package.__path__ = []
    sys.modules[name] = package

from transformers.integrations import hub_kernels
for name in ("fla", "causal_conv1d"):
    hub_kernels._PACKAGE_SUPPORTED_DEVICES[name] += ("cpu",)

import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as upstream
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.hub_decorated import torch_body
generated = MODELING_REGISTRY.get_module("qwen3_5", "gpu")
q, k = torch.randn(1, 5, 2, 8), torch.randn(1, 5, 2, 8)
v, g, beta = torch.randn(1, 5, 4, 4), -torch.rand(1, 5, 4), torch.rand(1, 5, 4)
x, w, conv_state = torch.randn(1, 6, 5), torch.randn(6, 4), torch.randn(1, 6, 3)
calls = {
    "torch_chunk_gated_delta_rule": lambda: ((q, k, v), {"g": g, "beta": beta, "output_final_state": True}),
    "torch_recurrent_gated_delta_rule": lambda: (
        (q[:, :1], k[:, :1], v[:, :1]), {"g": g[:, :1], "beta": beta[:, :1], "output_final_state": True}
    ),
    "causal_conv1d_fn": lambda: ((x, w, None), {"activation": "silu"}),
    "causal_conv1d_update": lambda: ((x[..., :1], conv_state.clone(), w, None, "silu"), {}),
}
for name, arguments in calls.items():
    try:
        args, kwargs = arguments()
        getattr(upstream, name)(*args, **kwargs)
        ran = "torch"
    except RuntimeError as error:
        ran = "stand-in" if str(error) == "stand-in kernel called" else repr(error)
    args, kwargs = arguments()
    ours = getattr(generated, name)(*args, **kwargs)
    args, kwargs = arguments()
    body = torch_body(getattr(upstream, name))(*args, **kwargs)
    ours, body = (out if isinstance(out, tuple) else (out,) for out in (ours, body))
    same = len(ours) == len(body) and all(torch.equal(a, b) for a, b in zip(ours, body))
    print(f"{name}: upstream {ran}, generated {'torch body' if same else 'other'}")
"""


def test_an_installed_fla_or_causal_conv1d_changes_upstream_but_not_the_generated_functions() -> None:
    """Upstream's hub decorator runs whatever package is installed where it supports the inputs' device; the
    generated functions are the torch bodies, so only a bound kernel family changes what the model computes."""
    done = run_code(_INSTALLED_STAND_INS, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        f"{name}: upstream stand-in, generated torch body"
        for name in (
            "torch_chunk_gated_delta_rule",
            "torch_recurrent_gated_delta_rule",
            "causal_conv1d_fn",
            "causal_conv1d_update",
        )
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_chunked_delta_kernels_match_upstream_loss_and_gradients(dtype: torch.dtype) -> None:
    with eager_slots_on_one_thread():
        check_parity(
            QWEN3_5.config(), QWEN3_5.causal_lm, batch=QWEN3_5.multimodal_batch(), ops=CHUNKED_DELTA, dtype=dtype
        )


def _linear_attention_only_model(*, upstream: bool = False) -> Any:
    """The tiny model with both layers Gated DeltaNet: attention layers would mix packed documents anyway."""
    text = {**QWEN3_5.config().text_config.to_dict(), "layer_types": ["linear_attention", "linear_attention"]}
    config = QWEN3_5.config(text_config=text)
    if upstream:
        return get_model_class("qwen3_5", QWEN3_5.causal_lm, use_hf=True)(config).eval()
    return build_model(config, architecture=QWEN3_5.causal_lm).eval()


def _packed_logits(model: Any, input_ids: torch.Tensor, bounds: list[int]) -> torch.Tensor:
    cu_seqlens = torch.tensor(bounds, dtype=torch.int32)
    longest = max(b - a for a, b in itertools.pairwise(bounds))
    with torch.no_grad():
        return model(
            input_ids=input_ids,
            use_cache=False,
            cu_seq_lens_q=cu_seqlens,
            cu_seq_lens_k=cu_seqlens,
            max_length_q=longest,
            max_length_k=longest,
        ).logits


def test_packed_documents_through_the_chunked_delta_kernels_give_each_documents_own_logits() -> None:
    """With cu_seq_lens_q, each document's conv window and delta-rule state start afresh (as on GPU)."""
    with eager_slots_on_one_thread():
        model = _linear_attention_only_model()
        input_ids = torch.randint(10, 40, (1, 12), generator=torch.Generator().manual_seed(0))
        with bound_ops(CHUNKED_DELTA), torch.no_grad():
            packed = _packed_logits(model, input_ids, [0, 5, 12])
            first = model(input_ids=input_ids[:, :5], use_cache=False).logits
            second = model(input_ids=input_ids[:, 5:], use_cache=False).logits
        torch.testing.assert_close(packed[:, :5], first, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(packed[:, 5:], second, rtol=1e-5, atol=1e-5)


def test_packed_documents_on_the_eager_path_are_refused_as_upstream_refuses_them() -> None:
    """The eager path is upstream's torch code, which would run packed documents as one sequence (the second
    document's conv window and state starting from the first one's); upstream's hub decorator refuses them on CPU
    at the delta rule, and the generated mixer at its first operation, the conv, naming the kernel families that
    keep documents apart."""
    with eager_slots_on_one_thread():
        model = _linear_attention_only_model()
        input_ids = torch.randint(10, 40, (1, 12), generator=torch.Generator().manual_seed(0))
        upstream = _linear_attention_only_model(upstream=True)
        with pytest.raises(ValueError, match="packed"):
            _packed_logits(upstream, input_ids, [0, 5, 12])
        with pytest.raises(
            ValueError, match=r"packed documents \(cu_seq_lens_q\).*bind the chunked_delta kernel family"
        ):
            _packed_logits(model, input_ids, [0, 5, 12])


def test_the_delta_rules_eager_path_refuses_packed_documents_itself() -> None:
    """Reached with the conv bound to a kernel that keeps documents apart, the torch delta rule still refuses
    ``cu_seqlens``: it would start the second document from the first one's state."""
    with eager_slots_on_one_thread():
        model = _linear_attention_only_model()
        input_ids = torch.randint(10, 40, (1, 12), generator=torch.Generator().manual_seed(0))
        conv_only = OpsConfig({"causal_conv1d": "chunked_delta"})
        with bound_ops(conv_only), pytest.raises(ValueError, match=r"packed documents \(cu_seqlens\) reach the chunk"):
            _packed_logits(model, input_ids, [0, 5, 12])


def test_one_document_with_its_boundaries_runs_on_the_eager_path_as_without_them() -> None:
    """``cu_seq_lens_q`` of one document (two entries) is the whole sequence: the conv runs it; the torch delta rule
    refuses any boundaries, as upstream's decorator does."""
    with eager_slots_on_one_thread():
        model = _linear_attention_only_model()
        input_ids = torch.randint(10, 40, (1, 12), generator=torch.Generator().manual_seed(0))
        delta_rule = OpsConfig({"chunk_gated_delta_rule": "chunked_delta"})
        with bound_ops(delta_rule), torch.no_grad():
            whole = model(input_ids=input_ids, use_cache=False).logits
            bounded = _packed_logits(model, input_ids, [0, 12])
        torch.testing.assert_close(bounded, whole, rtol=1e-5, atol=1e-6)
