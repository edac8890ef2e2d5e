"""The fused-loss guard multiplies by the output projection's weight: a head whose class has a forward of its own is
refused at generation time, naming it. Rendered against small upstream modules written here."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.errors import SnippetError
from modelgraft.generator.snippets import environment, render
from modelgraft.generator.upstream.index import ModuleIndex
from modelgraft.generator.upstream.member import UpstreamMember

UPSTREAM = """
class ToyScaledHead(nn.Linear):
    def forward(self, hidden_states):
        return super().forward(hidden_states) * self.logit_scale


class ToyForCausalLM:
    def __init__(self, config):
        self.lm_head = {head}

    def forward(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
        hidden_states = self.model(input_ids)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(loss=loss, logits=logits)
"""


def _render(tmp_path: Path, head: str) -> str:
    path = tmp_path / "modeling_toy.py"
    path.write_text(textwrap.dedent(UPSTREAM.format(head=head)))
    index = ModuleIndex.parse("toy.modeling_toy", path)
    member = UpstreamMember(index, index.method("ToyForCausalLM", "forward"), "ToyForCausalLM.forward")
    options = {"softcap": "", "scale": (), "head": "lm_head", "bias": False, "router_logits": (), "aux_loss": ""}
    text, _ = render(SnippetRef("causal_lm_loss_guard", options), member, environment())
    return text


def test_a_plain_linear_head_goes_behind_the_loss_slot(tmp_path: Path) -> None:
    text = _render(tmp_path, "nn.Linear(config.hidden_size, config.vocab_size, bias=False)")
    assert "causal_lm_loss_slot(" in text
    assert "self.lm_head.weight" in text


def test_a_head_class_with_its_own_forward_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SnippetError, match=r"self\.lm_head is ToyScaledHead \(line 2\), whose own forward \(line 3\)"):
        _render(tmp_path, "ToyScaledHead(config)")
