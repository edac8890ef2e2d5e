"""The fused-experts converter: per-expert pieces in, fused tensors out, every malformed input named."""

from __future__ import annotations

import pytest
import torch

from modelgraft.models.converters import ChainedConverter, CheckpointConverter, ConversionError
from modelgraft.models.converters.moe import FusedExpertsConverter

E, H, I = 3, 10, 4  # no two sizes coincide, so every transposition is detectable
MODULE = "model.layers.2.mlp.experts"


def _converter(**kwargs) -> FusedExpertsConverter:
    return FusedExpertsConverter(num_experts=E, hidden_size=H, intermediate_size=I, **kwargs)


def _pieces(seed: int = 0) -> dict[str, torch.Tensor]:
    """One layer's per-expert weights, as hub checkpoints name and shape them."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for e in range(E):
        out[f"{MODULE}.{e}.gate_proj.weight"] = torch.randn(I, H, generator=generator)
        out[f"{MODULE}.{e}.up_proj.weight"] = torch.randn(I, H, generator=generator)
        out[f"{MODULE}.{e}.down_proj.weight"] = torch.randn(H, I, generator=generator)
    return out


def _run(converter, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        assert converter.can_handle(key)
        out.update(converter.convert(key, tensor))
    out.update(converter.finalize())
    return out


def test_converter_satisfies_the_protocol() -> None:
    assert isinstance(_converter(), CheckpointConverter)


def test_per_expert_weights_fuse_gate_first_then_up() -> None:
    pieces = _pieces()
    out = _run(_converter(), pieces)
    assert set(out) == {f"{MODULE}.gate_up_proj", f"{MODULE}.down_proj"}
    gate_up, down = out[f"{MODULE}.gate_up_proj"], out[f"{MODULE}.down_proj"]
    assert gate_up.shape == (E, 2 * I, H) and down.shape == (E, H, I)
    for e in range(E):
        assert torch.equal(gate_up[e, :I], pieces[f"{MODULE}.{e}.gate_proj.weight"])
        assert torch.equal(gate_up[e, I:], pieces[f"{MODULE}.{e}.up_proj.weight"])
        assert torch.equal(down[e], pieces[f"{MODULE}.{e}.down_proj.weight"])


def test_a_fused_tensor_is_emitted_as_soon_as_its_last_expert_arrives() -> None:
    converter = _converter()
    emitted = [[key for key, _ in converter.convert(key, tensor)] for key, tensor in _pieces().items()]
    # Order per expert: gate, up, down; gate_up completes at the last expert's up, down_proj right after.
    assert emitted[-2:] == [[f"{MODULE}.gate_up_proj"], [f"{MODULE}.down_proj"]]
    assert all(not keys for keys in emitted[:-2])
    assert converter.finalize() == []


def test_arrival_order_does_not_matter() -> None:
    pieces = _pieces()
    shuffled = dict(reversed(list(pieces.items())))
    forward, backward = _run(_converter(), pieces), _run(_converter(), shuffled)
    assert all(torch.equal(forward[key], backward[key]) for key in forward)


def test_already_fused_tensors_pass_through() -> None:
    gate_up, down = torch.randn(E, 2 * I, H), torch.randn(E, H, I)
    out = _run(_converter(), {f"{MODULE}.gate_up_proj": gate_up, f"{MODULE}.down_proj": down})
    assert out[f"{MODULE}.gate_up_proj"] is gate_up and out[f"{MODULE}.down_proj"] is down


def test_transposed_fused_layouts_are_detected_by_shape() -> None:
    gate_up, down = torch.randn(E, 2 * I, H), torch.randn(E, H, I)
    stored = {f"{MODULE}.gate_up_proj": gate_up.transpose(1, 2), f"{MODULE}.down_proj": down.transpose(1, 2)}
    out = _run(_converter(), stored)
    assert torch.equal(out[f"{MODULE}.gate_up_proj"], gate_up) and torch.equal(out[f"{MODULE}.down_proj"], down)
    assert out[f"{MODULE}.gate_up_proj"].is_contiguous()


def test_transposed_per_expert_pieces_are_detected_by_shape() -> None:
    pieces = _pieces()
    out = _run(_converter(), {key: tensor.t() for key, tensor in pieces.items()})
    assert torch.equal(out[f"{MODULE}.gate_up_proj"], _run(_converter(), pieces)[f"{MODULE}.gate_up_proj"])


def test_a_shape_that_fits_neither_layout_is_named() -> None:
    with pytest.raises(ConversionError, match=r"gate_up_proj' has shape \[3, 8, 9\]; expected \[3, 8, 10\]"):
        _converter().convert(f"{MODULE}.gate_up_proj", torch.zeros(E, 2 * I, H - 1))


def test_finalize_names_the_missing_experts() -> None:
    converter = _converter()
    for key, tensor in _pieces().items():
        if ".1." not in key:
            converter.convert(key, tensor)
    message = (
        rf"{MODULE}\.<i>\.gate_proj\.weight is missing expert\(s\) 1; "
        rf"{MODULE}\.<i>\.up_proj\.weight is missing expert\(s\) 1; "
        rf"{MODULE}\.<i>\.down_proj\.weight is missing expert\(s\) 1"
    )
    with pytest.raises(ConversionError, match=message):
        converter.finalize()


def test_an_expert_index_beyond_the_config_is_rejected() -> None:
    with pytest.raises(ConversionError, match=f"expert {E} does not exist, the model has {E} experts"):
        _converter().convert(f"{MODULE}.{E}.gate_proj.weight", torch.zeros(I, H))


def test_a_piece_given_twice_is_rejected() -> None:
    converter = _converter()
    converter.convert(f"{MODULE}.0.gate_proj.weight", torch.zeros(I, H))
    with pytest.raises(ConversionError, match="appears twice"):
        converter.convert(f"{MODULE}.0.gate_proj.weight", torch.zeros(I, H))


def test_per_expert_pieces_after_the_fused_tensor_are_rejected() -> None:
    converter = _converter()
    converter.convert(f"{MODULE}.down_proj", torch.zeros(E, H, I))
    with pytest.raises(ConversionError, match="already given fused"):
        converter.convert(f"{MODULE}.0.down_proj.weight", torch.zeros(H, I))


def test_only_expert_weights_are_handled() -> None:
    converter = _converter()
    assert not converter.can_handle("model.layers.2.mlp.gate.weight")  # the router
    assert not converter.can_handle("model.layers.1.mlp.gate_proj.weight")  # a dense layer
    assert not converter.can_handle("model.embed_tokens.weight")


def test_mixtral_style_projection_names() -> None:
    converter = _converter(gate="w1", up="w3", down="w2")
    pieces = {
        key.replace("gate_proj", "w1").replace("up_proj", "w3").replace("down_proj", "w2"): t
        for key, t in _pieces().items()
    }
    assert set(_run(converter, pieces)) == {f"{MODULE}.gate_up_proj", f"{MODULE}.down_proj"}


def test_a_chain_routes_each_key_to_the_first_converter_that_handles_it() -> None:
    class Rename:
        def can_handle(self, key: str) -> bool:
            return key.startswith("old.")

        def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
            return [(key.replace("old.", "model.", 1), tensor)]

        def finalize(self) -> list[tuple[str, torch.Tensor]]:
            return []

    chain = ChainedConverter(Rename(), _converter())
    out = _run(chain, {"old.norm.weight": torch.ones(H), **_pieces()})
    assert set(out) == {"model.norm.weight", f"{MODULE}.gate_up_proj", f"{MODULE}.down_proj"}
    assert not chain.can_handle("lm_head.weight")
