"""Which way round expert matrices are stored is never read off a shape that fits both ways.

With ``H == 2I`` a fused ``gate_up_proj`` is ``[E, H, H]`` stored either way; with ``H == I`` the same holds
for ``down_proj`` and for every per-expert piece. These tests store the same experts both ways at those
sizes and check that the converter decides by the declared layout or by the checkpoint's other tensor,
and refuses when neither says (``modelgraft.models.converters.layout``).
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from modelgraft.models.checkpoint import load_checkpoint
from modelgraft.models.converters import ConversionError
from modelgraft.models.converters.moe import FusedExpertsConverter

E = 3
MODULE = "model.layers.0.mlp.experts"
GATE_UP, DOWN = f"{MODULE}.gate_up_proj", f"{MODULE}.down_proj"
#: (H, I) where one of the two fused projections has the same shape both ways round.
TIES = {"H==2I": (8, 4), "H==I": (6, 6)}


def _converter(hidden: int, intermediate: int, **kwargs) -> FusedExpertsConverter:
    return FusedExpertsConverter(num_experts=E, hidden_size=hidden, intermediate_size=intermediate, **kwargs)


def _modeling(hidden: int, intermediate: int) -> dict[str, torch.Tensor]:
    """The experts as the modeling holds them: gate_up_proj [E, 2I, H], down_proj [E, H, I]."""
    generator = torch.Generator().manual_seed(0)
    return {
        GATE_UP: torch.randn(E, 2 * intermediate, hidden, generator=generator),
        DOWN: torch.randn(E, hidden, intermediate, generator=generator),
    }


def _stored(tensors: dict[str, torch.Tensor], layout: str) -> dict[str, torch.Tensor]:
    if layout == "fused":
        return dict(tensors)
    return {key: tensor.transpose(1, 2).contiguous() for key, tensor in tensors.items()}


def _run(converter: FusedExpertsConverter, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        out.update(converter.convert(key, tensor))
    out.update(converter.finalize())
    return out


def _assert_equal(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for key, tensor in expected.items():
        assert torch.equal(actual[key], tensor), key


@pytest.mark.parametrize("order", ["gate_up_first", "down_first"])
@pytest.mark.parametrize("layout", ["fused", "transposed"])
@pytest.mark.parametrize("sizes", list(TIES.values()), ids=list(TIES))
def test_the_other_projection_decides_a_tied_one(sizes: tuple[int, int], layout: str, order: str) -> None:
    modeling = _modeling(*sizes)
    stored = _stored(modeling, layout)
    if order == "down_first":
        stored = dict(reversed(list(stored.items())))
    _assert_equal(_run(_converter(*sizes), stored), modeling)


@pytest.mark.parametrize("layout", ["fused", "transposed"])
@pytest.mark.parametrize("sizes", list(TIES.values()), ids=list(TIES))
def test_a_declared_layout_decides_a_tied_tensor_alone(sizes: tuple[int, int], layout: str) -> None:
    modeling = _modeling(*sizes)
    tied = GATE_UP if sizes[0] == 2 * sizes[1] else DOWN
    stored = _stored(modeling, layout)
    out = _run(_converter(*sizes, layout=layout), {tied: stored[tied]})
    assert torch.equal(out[tied], modeling[tied])


@pytest.mark.parametrize("sizes", list(TIES.values()), ids=list(TIES))
def test_a_tied_tensor_that_nothing_settles_is_refused(sizes: tuple[int, int]) -> None:
    tied = GATE_UP if sizes[0] == 2 * sizes[1] else DOWN
    converter = _converter(*sizes)
    assert converter.convert(tied, _modeling(*sizes)[tied]) == []  # held back, not guessed
    with pytest.raises(ConversionError, match=r"same in both layouts.*declare it \(layout='fused' or 'transposed'\)"):
        converter.finalize()


def test_a_declared_layout_is_checked_where_the_shape_tells() -> None:
    hidden, intermediate = TIES["H==2I"]
    down = _stored(_modeling(hidden, intermediate), "transposed")[DOWN]  # [E, I, H]: only transposed fits
    with pytest.raises(
        ConversionError, match=r"declared 'fused', which stores it as \[3, 8, 4\].*declared layout right"
    ):
        _converter(hidden, intermediate, layout="fused").convert(DOWN, down)


def test_one_checkpoint_holds_its_experts_one_way_round() -> None:
    hidden, intermediate = 10, 4  # no tie: each tensor shows its layout
    modeling = _modeling(hidden, intermediate)
    converter = _converter(hidden, intermediate)
    converter.convert(GATE_UP, modeling[GATE_UP])
    with pytest.raises(ConversionError, match="stored transposed, but .*gate_up_proj' was stored fused"):
        converter.convert(DOWN, modeling[DOWN].transpose(1, 2))


def test_an_unknown_layout_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="layout must be one of"):
        _converter(8, 4, layout="columns")


def _pieces(size: int, layout: str) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Per-expert weights at H == I (all three tie), stored in ``layout``, and the fused tensors they make."""
    modeling = _modeling(size, size)
    pieces = {}
    for e in range(E):
        gate, up = modeling[GATE_UP][e].chunk(2)
        for name, weight in (("gate_proj", gate), ("up_proj", up), ("down_proj", modeling[DOWN][e])):
            pieces[f"{MODULE}.{e}.{name}.weight"] = weight if layout == "fused" else weight.t().contiguous()
    return pieces, modeling


def test_tied_per_expert_pieces_are_linear_weights_unless_declared() -> None:
    size = TIES["H==I"][0]
    hub, modeling = _pieces(size, "fused")
    _assert_equal(_run(_converter(size, size), hub), modeling)
    exported, _ = _pieces(size, "transposed")
    _assert_equal(_run(_converter(size, size, layout="transposed"), exported), modeling)


def test_expert_parallel_converters_keep_the_declared_layout() -> None:
    hidden, intermediate = TIES["H==2I"]
    modeling = _modeling(hidden, intermediate)
    stored = _stored(modeling, "transposed")
    local = _converter(hidden, intermediate, layout="transposed").for_experts(1, 3)
    out = _run(local, {GATE_UP: stored[GATE_UP]})  # whole tensor, tied shape, sliced to experts 1-2
    assert torch.equal(out[GATE_UP], modeling[GATE_UP][1:3])


@pytest.mark.parametrize("layout", ["fused", "transposed"])
@pytest.mark.parametrize("sizes", list(TIES.values()), ids=list(TIES))
def test_qwen3_moe_loads_a_tied_checkpoint_in_either_layout(tmp_path, sizes: tuple[int, int], layout: str) -> None:
    """Through the registered converter and load_checkpoint, into the generated model: every weight lands right."""
    from transformers import Qwen3MoeConfig

    from modelgraft.models.loader import build_model
    from modelgraft.models.testing import seed_everything, tiny_config

    hidden, intermediate = sizes
    config = tiny_config(Qwen3MoeConfig, hidden_size=hidden, moe_intermediate_size=intermediate, num_experts=E)
    seed_everything(0)
    source = build_model(config, architecture="Qwen3MoeForCausalLM").state_dict()
    fused = {key: tensor for key, tensor in source.items() if key.endswith(("gate_up_proj", "down_proj"))}
    assert fused, "the tiny config has no sparse layer"
    stored = {**source, **_stored(fused, layout)}
    save_file({key: tensor.contiguous() for key, tensor in stored.items()}, str(tmp_path / "model.safetensors"))

    seed_everything(1)
    target = build_model(config, architecture="Qwen3MoeForCausalLM")
    load_checkpoint(target, tmp_path)
    for key, tensor in target.state_dict().items():
        assert torch.equal(tensor, source[key]), key
