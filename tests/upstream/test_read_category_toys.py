"""Which toy decoders the reader takes as decoder-only, by their cross-attention, causal switch and head: one fact
per test. A cross-attention or a causal switch behind a config flag counts as the default config builds it."""

from __future__ import annotations

from pathlib import Path

from modelgraft.generator.upstream.reader import read_model
from modelgraft.generator.upstream.structure import ModelStructure

CONFIGURATION = """
class ToyConfig(PreTrainedConfig):
    model_type = "toy"
    add_cross_attention: bool = {cross_default}
    causal: bool = {causal_default}
"""

MODELING = """
from torch import nn


class ToyPreTrainedModel(PreTrainedModel):
    config_class = ToyConfig


class ToyBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = nn.Linear(config.hidden_size, config.hidden_size)
{block}

class ToyModel(ToyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.causal = {causal}
        self.layers = nn.ModuleList([ToyBlock(config) for _ in range(config.num_hidden_layers)])


class {head}(ToyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
{head_init}
        self.model = ToyModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, input_ids, encoder_hidden_states=None, labels=None):
        hidden_states = self.model(input_ids, encoder_hidden_states)
        logits = self.lm_head(hidden_states)
        return self.loss_function(logits, labels, vocab_size=self.config.vocab_size)
"""

BEHIND_THE_FLAG = """\
        if config.add_cross_attention:
            self.crossattention = nn.Linear(config.hidden_size, config.hidden_size)
"""

IN_THE_ELSE_BRANCH = """\
        if config.add_cross_attention:
            pass
        else:
            self.crossattention = nn.Linear(config.hidden_size, config.hidden_size)
"""

AUTO_TABLE = """
MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict(
    [
        ("toy", "ToyLMHeadModel"),
    ]
)
"""


def _read(
    tmp_path: Path,
    *,
    block: str = BEHIND_THE_FLAG,
    cross_default: str = "False",
    causal: str = "True",
    causal_default: str = "False",
    head: str = "ToyForCausalLM",
    head_init: str = "",
    auto_table: str = "",
) -> ModelStructure:
    package = tmp_path / "transformers" / "models" / "toy"
    package.mkdir(parents=True)
    modeling = MODELING.format(block=block, causal=causal, head=head, head_init=head_init or "        pass")
    (package / "modeling_toy.py").write_text(modeling, encoding="utf-8")
    configuration = CONFIGURATION.format(cross_default=cross_default, causal_default=causal_default)
    (package / "configuration_toy.py").write_text(configuration, encoding="utf-8")
    if auto_table:
        auto = tmp_path / "transformers" / "models" / "auto"
        auto.mkdir(parents=True)
        (auto / "modeling_auto.py").write_text(auto_table, encoding="utf-8")
    return read_model("toy", root=tmp_path)


def test_a_cross_attention_behind_a_flag_that_is_off_leaves_a_decoder_only_model(tmp_path: Path) -> None:
    assert _read(tmp_path).category == "dense"


def test_a_cross_attention_behind_a_flag_that_is_on_is_an_encoder_decoder_s_decoder(tmp_path: Path) -> None:
    s = _read(tmp_path, cross_default="True")
    assert s.category == "out_of_category" and "encoder_hidden_states" in s.category_reason


def test_a_flag_the_module_switches_on_counts_as_on(tmp_path: Path) -> None:
    s = _read(tmp_path, head_init="        config.add_cross_attention = True")
    assert s.category == "out_of_category"


def test_a_cross_attention_under_any_other_condition_counts_as_built(tmp_path: Path) -> None:
    assert _read(tmp_path, block=IN_THE_ELSE_BRANCH).category == "out_of_category"


def test_encoder_states_without_any_cross_attention_are_still_an_encoder_decoder_s_decoder(tmp_path: Path) -> None:
    s = _read(tmp_path, block="        pass\n")
    assert s.category == "out_of_category" and "encoder_hidden_states" in s.category_reason


def test_a_causal_switch_read_from_a_flag_that_is_off_attends_both_ways(tmp_path: Path) -> None:
    s = _read(tmp_path, causal="config.causal")
    assert s.category == "out_of_category" and "follows config.causal" in s.category_reason


def test_a_causal_switch_read_from_a_flag_that_is_on_is_a_decoder(tmp_path: Path) -> None:
    assert _read(tmp_path, causal="config.causal", causal_default="True").category == "dense"


def test_a_head_the_auto_causal_lm_table_names_is_the_causal_lm(tmp_path: Path) -> None:
    s = _read(tmp_path, head="ToyLMHeadModel", auto_table=AUTO_TABLE)
    assert (s.category, s.causal_lm.cls) == ("dense", "ToyLMHeadModel")


def test_without_the_table_a_head_named_otherwise_is_no_causal_lm(tmp_path: Path) -> None:
    s = _read(tmp_path, head="ToyLMHeadModel")
    assert s.category == "out_of_category" and s.causal_lm is None
