"""The Gated DeltaNet guards (hybrid recipe), rendered against Qwen3.5's real upstream functions.

Each guard puts its slot call in front of upstream's unchanged torch body, handing the slot upstream's own
parameters (and the cu_seqlens upstream's forward passes in ``**kwargs``, through ``causal_conv1d_forward`` since
transformers 5.25), and refuses a function of another signature; the recipe drops the hub decorator from the four
module-level functions and nothing else.
"""

from __future__ import annotations

import pytest

from modelgraft.generator import PatchConfig
from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.errors import SnippetError
from modelgraft.generator.recipes.hybrid import HUB_FALLBACK_DECORATOR, hybrid
from modelgraft.generator.recipes.vlm import VisionTower
from modelgraft.generator.snippets import environment, render
from modelgraft.generator.upstream.index import UpstreamSources
from modelgraft.generator.upstream.member import UpstreamMember

QWEN3_5 = "transformers.models.qwen3_5.modeling_qwen3_5"


def _render(snippet: str, target: str, **variables: object) -> str:
    index = UpstreamSources(None).get(QWEN3_5)
    if "." in target:
        cls, method = target.split(".")
        node = index.method(cls, method)
    else:
        node = index.members[target]
    member = UpstreamMember(index, node, target)
    text, _ = render(SnippetRef(name=snippet, variables=variables), member, environment())
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_gated_norm_guard_hands_the_slot_the_gate_eps_and_activation() -> None:
    text = _render(
        "rms_norm_gated_guard", "Qwen3_5RMSNormGated.forward", eps="variance_epsilon", activation="self.activation"
    )
    # The pinned transformers' signature: gate required, both annotated.
    assert (
        "def forward(self, hidden_states: torch.Tensor, gate: torch.Tensor) -> torch.Tensor: "
        "if rms_norm_gated_slot.use_non_eager_impl: "
        "return rms_norm_gated_slot(hidden_states, gate, self.weight, self.variance_epsilon, "
        "activation=self.activation) input_dtype = hidden_states.dtype"
    ) in _one_line(text)


def test_conv_guard_hands_the_slot_the_forwards_packed_document_bounds() -> None:
    text = _one_line(_render("causal_conv1d_guard", "causal_conv1d_fn", update=False))
    assert (
        "if causal_conv1d_slot.use_non_eager_impl: return causal_conv1d_slot(hidden_states, weight, bias, "
        'activation, cu_seqlens=kwargs.get("cu_seq_lens_q")) if kwargs.get("cu_seq_lens_q")'
    ) in text


def test_conv_guards_eager_path_refuses_more_than_one_packed_document_before_upstreams_body() -> None:
    text = _one_line(_render("causal_conv1d_guard", "causal_conv1d_fn", update=False))
    assert (
        'if kwargs.get("cu_seq_lens_q") is not None and kwargs["cu_seq_lens_q"].numel() > 2: raise ValueError( '
        '"packed documents (cu_seq_lens_q) reach the causal_conv1d torch path'
    ) in text
    assert "bind the chunked_delta kernel family (CPU) or causal_conv1d (GPU)" in text
    assert text.index("raise ValueError(") < text.index("_, hidden_size, seq_len = hidden_states.shape")


def test_conv_update_guard_hands_the_slot_the_state_it_updates_in_place() -> None:
    text = _one_line(_render("causal_conv1d_guard", "causal_conv1d_update", update=True))
    assert (
        "if causal_conv1d_update_slot.use_non_eager_impl: return causal_conv1d_update_slot(hidden_states, "
        "conv_state, weight, bias, activation) _, hidden_size, seq_len = hidden_states.shape"
    ) in text


def test_conv_guard_refuses_a_function_without_the_conv_states_parameters() -> None:
    with pytest.raises(SnippetError, match="the causal_conv1d_update slot needs hidden_states, conv_state"):
        _render("causal_conv1d_guard", "causal_conv1d_fn", update=True)


@pytest.mark.parametrize(
    ("target", "slot", "chunk_size"),
    [
        ("torch_chunk_gated_delta_rule", "chunk_gated_delta_rule", "chunk_size=chunk_size, "),
        ("torch_recurrent_gated_delta_rule", "recurrent_gated_delta_rule", ""),
    ],
)
def test_delta_rule_guard_hands_the_slot_upstreams_arguments_and_cu_seqlens(
    target: str, slot: str, chunk_size: str
) -> None:
    text = _one_line(_render("gated_delta_rule_guard", target, slot=slot))
    assert (
        f"if {slot}_slot.use_non_eager_impl: return {slot}_slot(query, key, value, g, beta, {chunk_size}"
        "initial_state=initial_state, output_final_state=output_final_state, "
        'use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=kwargs.get("cu_seqlens")) '
        'if kwargs.get("cu_seqlens") is not None: raise ValueError('
    ) in text
    assert "initial_dtype = query.dtype" in text.partition("raise ValueError(")[2]


def test_delta_rule_guard_puts_the_hub_decorators_name_on_the_torch_body() -> None:
    """Upstream's use_kernelized_func refuses a function without use_kernel_forward_from_hub: the dropped fallback
    decorator's name goes on the generated function instead."""
    text = _one_line(_render("gated_delta_rule_guard", "torch_chunk_gated_delta_rule", slot="chunk_gated_delta_rule"))
    assert '@use_kernel_forward_from_hub("chunk_gated_delta_rule") def torch_chunk_gated_delta_rule(' in text


def test_delta_rule_guard_refuses_an_unknown_slot() -> None:
    with pytest.raises(SnippetError, match="slot must be one of chunk_gated_delta_rule, recurrent_gated_delta_rule"):
        _render("gated_delta_rule_guard", "torch_chunk_gated_delta_rule", slot="delta_rule")


def test_delta_rule_guard_refuses_a_function_without_its_state_options() -> None:
    with pytest.raises(SnippetError, match="takes no chunk_size"):
        _render("gated_delta_rule_guard", "torch_recurrent_gated_delta_rule", slot="chunk_gated_delta_rule")


def test_hybrid_recipe_drops_only_the_hub_decorator_and_only_from_the_four_functions() -> None:
    config = PatchConfig(source_module=QWEN3_5, target_file="patched.py", description="hybrid recipe under test")
    hybrid(config, prefix="Qwen3_5", vision=VisionTower("Qwen3_5VisionModel"), mrope=None)
    dropping = {patch.target: patch.keep_decorators for patch in config.patches if patch.keep_decorators is not True}
    assert dropping == dict.fromkeys(
        (
            "causal_conv1d_fn",
            "causal_conv1d_update",
            "torch_chunk_gated_delta_rule",
            "torch_recurrent_gated_delta_rule",
        ),
        (HUB_FALLBACK_DECORATOR,),
    )
