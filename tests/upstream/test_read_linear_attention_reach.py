"""The Gated DeltaNet reader follows the mixer's calls into module-level functions (small modules, no upstream).

Transformers 5.16's mixers called the causal convs themselves; 5.25's call ``causal_conv1d_forward``, which calls
both and hands ``causal_conv1d_fn`` the mixer's ``**kwargs``. The reader finds the convs either way, names the
functions in between, and records ``packed`` only where ``cu_seq_lens_q`` still reaches the conv and the chunked
delta rule.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.read_linear_attention import CALL_DEPTH, read_gated_delta_net
from modelgraft.generator.upstream.source import ModelSource
from modelgraft.generator.upstream.structure import GatedDeltaNetInfo

#: The module-level pieces every toy shares: the two convs and the two delta rules, with upstream's signatures.
FUNCTIONS = """
def causal_conv1d_update(hidden_states, conv_state, weight, bias=None, activation=None):
    return hidden_states


def causal_conv1d_fn(hidden_states, weight, bias=None, activation=None, **kwargs):
    return hidden_states


def torch_chunk_gated_delta_rule(query, key, value, g, beta, **kwargs):
    return query, None


def torch_recurrent_gated_delta_rule(query, key, value, g, beta, **kwargs):
    return query, None
"""

#: 5.25's shape: a module-level function between the mixer and the convs.
CONV_FORWARD = """
def causal_conv1d_forward(conv1d, hidden_states, cache, layer_idx, activation=None, **kwargs):
    if cache is not None and hidden_states.shape[-1] == 1:
        return causal_conv1d_update(hidden_states, cache, conv1d.weight, conv1d.bias, activation=activation)
    return causal_conv1d_fn(hidden_states, conv1d.weight, conv1d.bias, activation=activation, **kwargs)
"""

DELTA_RULES = """
        if cache is not None:
            out, _ = torch_recurrent_gated_delta_rule(x, x, x, g=x, beta=x, cu_seqlens=kwargs.pop("cu_seq_lens_q", None), **kwargs)
        else:
            out, _ = torch_chunk_gated_delta_rule(x, x, x, g=x, beta=x, cu_seqlens=kwargs.pop("cu_seq_lens_q", None), **kwargs)
            for i in range(2):
                out, _ = torch_recurrent_gated_delta_rule(x, x, x, g=x, beta=x, **kwargs)
        return out
"""

#: The decoder layer that hands the mixer its ``**kwargs``.
LAYER = """
class ToyDecoderLayer:
    def __init__(self, config):
        self.linear_attn = ToyGatedDeltaNet(config)

    def forward(self, hidden_states, **kwargs):
        return self.linear_attn(hidden_states, **kwargs)
"""


def _read(tmp_path: Path, conv_calls: str, *, helpers: str = CONV_FORWARD) -> GatedDeltaNetInfo:
    mixer = (
        "class ToyGatedDeltaNet:\n"
        "    def __init__(self, config):\n"
        "        self.conv1d = config\n\n"
        "    def forward(self, x, cache=None, **kwargs):\n"
        f"{textwrap.indent(textwrap.dedent(conv_calls), ' ' * 8)}"
        f"{DELTA_RULES}"
    )
    path = tmp_path / "modeling_toy.py"
    path.write_text(f"{FUNCTIONS}\n{helpers}\n\n{mixer}\n\n{LAYER}", encoding="utf-8")
    source = ModelSource(model="toy", index=ModuleIndex.parse("toy.modeling_toy", path), sources=UpstreamSources())
    info = read_gated_delta_net(source)
    assert info is not None and info.mixer == "ToyGatedDeltaNet"
    return info


def test_convs_the_forward_calls_itself_have_no_function_in_between(tmp_path: Path) -> None:
    """5.16's shape."""
    info = _read(
        tmp_path,
        """
        if cache is not None:
            x = causal_conv1d_update(x, cache, self.conv1d.weight, self.conv1d.bias, self.activation)
        else:
            x = causal_conv1d_fn(x, self.conv1d.weight, self.conv1d.bias, activation=self.activation, **kwargs)
        """,
        helpers="",
    )
    assert (info.conv, info.conv_update, info.conv_via, info.conv_update_via) == (
        "causal_conv1d_fn",
        "causal_conv1d_update",
        (),
        (),
    )
    assert info.packed and not info.reason


def test_convs_a_module_function_calls_for_the_forward_are_found_and_the_function_named(tmp_path: Path) -> None:
    """5.25's shape: the kwargs reach causal_conv1d_fn through causal_conv1d_forward's ``**kwargs``."""
    info = _read(
        tmp_path, "x = causal_conv1d_forward(self.conv1d, x, cache, self.layer_idx, activation='silu', **kwargs)\n"
    )
    assert (info.conv, info.conv_update) == ("causal_conv1d_fn", "causal_conv1d_update")
    assert (info.conv_via, info.conv_update_via) == (("causal_conv1d_forward",), ("causal_conv1d_forward",))
    assert info.packed and not info.reason


def test_a_function_in_between_that_drops_the_kwargs_leaves_the_conv_unpacked(tmp_path: Path) -> None:
    helpers = CONV_FORWARD.replace("activation=activation, **kwargs)", "activation=activation)")
    info = _read(
        tmp_path,
        "x = causal_conv1d_forward(self.conv1d, x, cache, self.layer_idx, activation='silu', **kwargs)\n",
        helpers=helpers,
    )
    assert info.conv == "causal_conv1d_fn" and not info.reason
    assert not info.packed


def test_a_forward_that_pops_the_boundaries_before_the_conv_leaves_it_unpacked(tmp_path: Path) -> None:
    info = _read(
        tmp_path,
        """
        cu_seqlens = kwargs.pop("cu_seq_lens_q", None)
        x = causal_conv1d_forward(self.conv1d, x, cache, self.layer_idx, activation='silu', **kwargs)
        """,
    )
    assert info.conv == "causal_conv1d_fn"
    assert not info.packed


def test_convs_beyond_the_call_depth_are_not_found_and_the_mixer_is_refused(tmp_path: Path) -> None:
    wrappers = "".join(
        f"\n\ndef wrap{i}(conv1d, x, cache, layer_idx, **kwargs):\n"
        f"    return {f'wrap{i + 1}' if i + 1 < CALL_DEPTH else 'causal_conv1d_forward'}(conv1d, x, cache, layer_idx, **kwargs)\n"
        for i in range(CALL_DEPTH)
    )
    info = _read(
        tmp_path, "x = wrap0(self.conv1d, x, cache, self.layer_idx, **kwargs)\n", helpers=CONV_FORWARD + wrappers
    )
    assert (info.conv, info.conv_update, info.packed) == (None, None, False)
    assert "calls no causal conv1d of the slots' signature" in info.reason
