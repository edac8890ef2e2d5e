"""What ``apply_fsdp`` decides before any rank communicates: the precision policy, which modules are routers, and
which modules are its per-layer units."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from modelgraft.models.distributed import decoder_layers, mixed_precision, router_modules

from .scenarios import config_of, fresh_model


def test_mixed_precision_reduces_gradients_in_fp32_unless_told_otherwise() -> None:
    assert mixed_precision(torch.bfloat16).reduce_dtype == torch.float32
    assert mixed_precision(torch.bfloat16, reduce_dtype=None).reduce_dtype is None


@pytest.mark.parametrize(
    ("name", "sparse_layers"),
    [("qwen3_moe", 2), ("gpt_oss", 3), ("llama", 0)],  # qwen3_moe's layer 1 is dense (mlp_only_layers)
)
def test_router_modules_are_the_modules_the_model_records_router_logits_from(name: str, sparse_layers: int) -> None:
    model = fresh_model(name, config_of(name))
    routers = router_modules(model)
    assert len(routers) == sparse_layers
    recorded = getattr(model, "_can_record_outputs", {}).get("router_logits")
    assert all(isinstance(router, recorded.target_class) for router in routers)


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(2, 2)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = _Mlp()


class _Nested(nn.Module):
    """Idefics2's layout: a listed MLP inside a listed block, and one on its own next to them."""

    _no_split_modules = ("_Block", "_Mlp")

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_Block(), _Block()])
        self.projector = _Mlp()


def test_a_listed_module_inside_another_listed_one_is_part_of_that_one_s_unit() -> None:
    model = _Nested()
    assert decoder_layers(model) == [model.blocks[0], model.blocks[1], model.projector]


class _Decoder(nn.Module):
    """A language model built from a text sub-config: it lists its own decoder layers."""

    _no_split_modules = ("_Block",)

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Block(), _Block()])


class _Composed(nn.Module):
    """Idefics3's layout: the top model lists only its tower's blocks, the language model its own layers."""

    _no_split_modules = ("_Mlp",)

    def __init__(self) -> None:
        super().__init__()
        self.tower = nn.ModuleList([_Mlp()])
        self.language_model = _Decoder()


def test_the_decoder_layers_a_sub_model_lists_are_units_too() -> None:
    model = _Composed()
    assert decoder_layers(model) == [model.tower[0], *model.language_model.layers]
