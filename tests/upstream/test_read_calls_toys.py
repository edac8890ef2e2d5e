"""Which module calls the reader takes as call sites, on a toy upstream package: one fact per test."""

from __future__ import annotations

from pathlib import Path

from modelgraft.generator.upstream.reader import read_model
from modelgraft.generator.upstream.structure import CallSites

CONFIGURATION = """
class ToyConfig(PreTrainedConfig):
    model_type = "toy"
"""

#: A decoder layer in OPT's shape: each norm called before its block or after it, as the config says.
LAYER = """
from torch import nn


class ToyDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm = nn.LayerNorm(config.hidden_size)
        self.block = nn.Linear(config.hidden_size, config.hidden_size)
        self.before = config.do_layer_norm_before

    def forward(self, hidden_states):
{body}
"""

ON_EITHER_SIDE = """\
        if self.before:
            hidden_states = self.norm(hidden_states)
        hidden_states = self.block(hidden_states)
        if not self.before:
            hidden_states = self.norm(hidden_states)
        return hidden_states
"""

TWICE_IN_ONE_EXPRESSION = """\
        return self.block(self.norm(hidden_states) + self.norm(hidden_states * 2))
"""

PASSED_A_KEYWORD = """\
        hidden_states = self.norm(hidden_states)
        hidden_states = self.block(hidden_states)
        hidden_states = self.norm(input=hidden_states)
        return hidden_states
"""


#: A decoder in OPT's shape: its final norm built or set to None as the config says, called where it was built.
OPTIONAL_NORM = """
from torch import nn


class ToyDecoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.final_norm:
            self.norm = nn.LayerNorm(config.hidden_size)
        else:
            self.norm = None
        self.block = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states):
        hidden_states = self.block(hidden_states)
        if self.norm is not None:
            hidden_states = self.norm(hidden_states)
        return hidden_states
"""


def _call_sites(tmp_path: Path, body: str, layer: str = LAYER) -> tuple[CallSites, ...]:
    package = tmp_path / "transformers" / "models" / "toy"
    package.mkdir(parents=True)
    (package / "modeling_toy.py").write_text(layer.format(body=body), encoding="utf-8")
    (package / "configuration_toy.py").write_text(CONFIGURATION, encoding="utf-8")
    return read_model("toy", root=tmp_path).call_sites


def test_a_norm_assigned_in_a_statement_of_its_own_on_either_side_of_a_block_is_a_site(tmp_path: Path) -> None:
    (site,) = _call_sites(tmp_path, ON_EITHER_SIDE)
    assert (site.cls, site.layer_norms) == ("ToyDecoderLayer", ("norm",))


def test_a_norm_called_twice_in_one_expression_is_no_site(tmp_path: Path) -> None:
    assert _call_sites(tmp_path, TWICE_IN_ONE_EXPRESSION) == ()


def test_a_norm_called_twice_and_once_with_a_keyword_is_no_site(tmp_path: Path) -> None:
    assert _call_sites(tmp_path, PASSED_A_KEYWORD) == ()


def test_a_norm_built_or_set_to_none_is_a_site(tmp_path: Path) -> None:
    (site,) = _call_sites(tmp_path, "", layer=OPTIONAL_NORM)
    assert (site.cls, site.layer_norms) == ("ToyDecoder", ("norm",))
