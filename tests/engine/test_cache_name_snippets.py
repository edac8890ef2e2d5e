"""Snippets read the KV cache's name from upstream: ``past_key_values`` until transformers 5.24, ``cache`` after.

Each snippet is rendered against a small upstream module written here in both spellings, so these tests hold
whatever version is pinned.
"""

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
class ToyForSequenceClassification:
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, {cache}=None, inputs_embeds=None,
                labels=None, use_cache=None, **kwargs):
        return None


class ToyTextModel:
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, {cache}=None, inputs_embeds=None,
                use_cache=None, **kwargs):
        if use_cache and {cache} is None:
            {cache} = DynamicCache(config=self.config)
        mask = create_causal_mask(config=self.config, inputs_embeds=inputs_embeds, {cache}={cache})
        return mask
"""


def _member(tmp_path: Path, cache: str, target: str) -> UpstreamMember:
    path = tmp_path / "modeling_toy.py"
    path.write_text(textwrap.dedent(UPSTREAM.format(cache=cache)))
    index = ModuleIndex.parse("toy.modeling_toy", path)
    cls, method = target.split(".")
    return UpstreamMember(index, index.method(cls, method), target)


@pytest.mark.parametrize("cache", ["cache", "past_key_values"])
def test_a_member_names_its_cache_parameter_as_upstream_does(tmp_path: Path, cache: str) -> None:
    assert _member(tmp_path, cache, "ToyTextModel.forward").cache_param == cache


@pytest.mark.parametrize("cache", ["cache", "past_key_values"])
def test_the_sequence_classification_forward_takes_passes_and_returns_upstreams_cache(
    tmp_path: Path, cache: str
) -> None:
    member = _member(tmp_path, cache, "ToyForSequenceClassification.forward")
    text, _ = render(SnippetRef("sequence_classification_forward", {}), member, environment())

    assert f"    {cache}: Cache | None = None,\n" in text
    assert f"        {cache}={cache},\n" in text
    assert f"        {cache}=transformer_outputs.{cache},\n" in text
    other = "past_key_values" if cache == "cache" else "cache"
    assert f" {other}=" not in text and f" {other}:" not in text and f".{other}" not in text


@pytest.mark.parametrize("cache", ["cache", "past_key_values"])
def test_the_packed_documents_guard_hands_the_helper_upstreams_cache(tmp_path: Path, cache: str) -> None:
    member = _member(tmp_path, cache, "ToyTextModel.forward")
    text, _ = render(SnippetRef("vlm_packed_documents_guard", {"helper": "packs"}), member, environment())

    assert f"if packs(position_ids, attention_mask, {cache}):\n        use_cache = False\n" in text


def test_a_forward_without_a_cache_is_refused_naming_both_spellings(tmp_path: Path) -> None:
    member = _member(tmp_path, "kv", "ToyTextModel.forward")

    with pytest.raises(SnippetError, match=r"a cache \(cache or past_key_values\)"):
        render(SnippetRef("vlm_packed_documents_guard", {"helper": "packs"}), member, environment())
