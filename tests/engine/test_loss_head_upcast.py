"""A head call that upcasts its logits (``self.lm_head(h).float()``, mllama's): the reader records the upcast, and the
fused-loss guard hands back the kernel's logits in fp32 as upstream's forward returns them. Rendered against a small
upstream module written here."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.snippets import environment, render
from modelgraft.generator.upstream.index import ModuleIndex
from modelgraft.generator.upstream.member import UpstreamMember
from modelgraft.generator.upstream.read_heads import UPCAST, _head_call

UPSTREAM = """
class ToyForCausalLM:
    def forward(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
        hidden_states = self.model(input_ids)
        logits = self.lm_head(hidden_states).float()
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(loss=loss, logits=logits)
"""


def _render(tmp_path: Path, **options: object) -> str:
    path = tmp_path / "modeling_toy.py"
    path.write_text(textwrap.dedent(UPSTREAM))
    index = ModuleIndex.parse("toy.modeling_toy", path)
    member = UpstreamMember(index, index.method("ToyForCausalLM", "forward"), "ToyForCausalLM.forward")
    variables = {"softcap": "", "scale": (), "head": "lm_head", "bias": False, "router_logits": (), "aux_loss": ""}
    text, _ = render(SnippetRef("causal_lm_loss_guard", variables | options), member, environment())
    return text


def _value(source: str) -> ast.expr:
    return ast.parse(source, mode="eval").body


def test_a_float_on_the_head_call_is_read_as_an_upcast() -> None:
    assert _head_call(_value("self.lm_head(h).float()"), "lm_head")[1] == (UPCAST,)


def test_a_contiguous_head_call_is_no_step() -> None:
    assert _head_call(_value("self.lm_head(h).contiguous()"), "lm_head")[1] == ()


def test_an_upcast_and_a_scale_are_both_read_upcast_first() -> None:
    steps = _head_call(_value("self.lm_head(h).float() * self.logit_scale"), "lm_head")[1]
    assert steps == (UPCAST, ("scale_mul", "self.logit_scale"))


def test_the_guard_returns_the_kernels_logits_in_fp32_for_an_upcasting_head(tmp_path: Path) -> None:
    text = " ".join(_render(tmp_path, logits_fp32=True).split())
    assert "loss, logits = causal_lm_loss_slot(" in text
    assert (
        "if logits is not None: # upstream's logits are fp32: its head call upcasts them logits = logits.float()"
        in text
    )


def test_the_guard_leaves_the_logits_dtype_alone_without_the_option(tmp_path: Path) -> None:
    """Only upstream's own eager path (kept as it is) upcasts: the slot's logits are returned as the kernel gave them."""
    assert _render(tmp_path).count(".float()") == 1
    assert _render(tmp_path, logits_fp32=True).count(".float()") == 2
