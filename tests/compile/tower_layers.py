"""The zoo's vision and audio tower blocks as the compile tests take them: the first block of one tower per family.

Towers: every vision tower of the zoo's VLMs, Omni models and library vision encoders, and every Omni model's
audio tower, found through ``modelgraft.models.MODEL_PACKAGES`` and each package's parity declaration
(:func:`zoo_towers`). :data:`FAMILY_OF` names each tower's family; a tower of a new model has none until it is
added there (a test says so). Within a family the block is the same upstream code, copied into each model's
generated file (Qwen2.5-Omni's and Qwen2.5-VL's vision blocks are Qwen2-VL's attention with an RMSNorm and a gated
MLP; Qwen3.5's, Qwen3-VL-MoE's and Qwen3-Omni's are Qwen3-VL's; LLaVA-OneVision's, PaliGemma's and Idefics3's towers are
SigLIP's), so the compile tests take the first tower of each family in package order (:data:`TOWERS`): a second
member would add test time and no code.

Each block is built from the tiny config its model's own tests use, and its inputs are recorded by a forward
pre-hook during an eager forward of the whole tiny model (eval mode, no gradient) on a batch built the way its
own tests build theirs, cut to two images (or an image, a video and two audio clips; one image for a composed
VLM): a Qwen-VL block's attention runs once per image, and so is traced once per image. The block the tests
compile is a copy taken before that forward (:attr:`Recorded.block`): a forward that asks a tower for hidden
states, as a composed VLM's does, hangs transformers' output-capturing hooks on the tower's modules
(:attr:`Recorded.hooked_block` keeps them; ``test_towers.py`` shows what they do to a trace).

Kernel cases of a block: ``unbound`` and ``reference`` (every slot the block calls bound to its reference kernel,
except those in ``eager.UNTRACEABLE``). No CPU kernel family serves a slot a tower block calls (they serve the
loss, the MoE experts, the DSA indexers and the Gated DeltaNet mixer), which a test checks, so there is no
family case, as there is for the decoder layers (``layers.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch import nn

from modelgraft import models
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, bound_ops
from modelgraft.models.testing import layer_compile
from modelgraft.models.testing.declarations import parity_declaration
from modelgraft.models.testing.layer_compile import slots_called
from modelgraft.models.testing.omni_suite import OmniModel
from modelgraft.models.testing.scaffold_composed import ScaffoldComposedVlm
from modelgraft.models.testing.vision_encoder_suite import VisionEncoderModel
from modelgraft.models.testing.vlm_processor import synthetic_image
from modelgraft.models.testing.vlm_suite import IMAGE, VlmModel

__all__ = [
    "FAMILY_OF",
    "KERNEL_CASES",
    "TOWERS",
    "Recorded",
    "TowerCase",
    "bound",
    "called_slots",
    "is_composed",
    "recorded",
    "zoo_towers",
]


@dataclass(frozen=True)
class TowerCase:
    """One tower of one zoo model, and how its block traces."""

    package: str
    tower: str  # "vision" or "audio"
    family: str
    #: The block's attention reads its chunk lengths on the host (upstream's ``lengths.tolist()`` before
    #: ``torch.split``): dynamo breaks the graph there.
    reads_lengths_on_host: bool = False

    @property
    def id(self) -> str:
        return f"{self.package}-{self.tower}"


#: The family of every tower of the zoo by (package, tower), and whether its block's attention reads its chunk
#: lengths on the host (the Qwen-VL and audio blocks: upstream's ``lengths.tolist()`` before ``torch.split``).
FAMILY_OF: dict[tuple[str, str], tuple[str, bool]] = {
    ("qwen2_vl", "vision"): ("Qwen-VL vision", True),
    ("qwen2_5_vl", "vision"): ("Qwen-VL vision", True),
    ("qwen2_5_omni", "vision"): ("Qwen-VL vision", True),
    ("qwen3_vl", "vision"): ("Qwen3-VL vision", True),
    ("qwen3_vl_moe", "vision"): ("Qwen3-VL vision", True),
    ("qwen3_5", "vision"): ("Qwen3-VL vision", True),
    ("qwen3_5_moe", "vision"): ("Qwen3-VL vision", True),
    ("qwen3_omni_moe", "vision"): ("Qwen3-VL vision", True),
    ("qwen2_5_omni", "audio"): ("Whisper-like audio", True),
    ("qwen3_omni_moe", "audio"): ("Whisper-like audio", True),
    ("glm4v", "vision"): ("GLM-4V vision", True),
    ("siglip", "vision"): ("SigLIP", False),
    ("idefics3_vision", "vision"): ("SigLIP", False),
    ("llava_onevision", "vision"): ("SigLIP", False),
    ("paligemma", "vision"): ("SigLIP", False),
    ("clip", "vision"): ("CLIP", False),
    ("internvl", "vision"): ("InternViT", False),
    ("pixtral", "vision"): ("Pixtral", False),
    ("mistral_large4", "vision"): ("Pixtral", False),
}


def _towers_of(declaration: Any) -> dict[str, str]:
    """Tower name -> attribute path from the model its tests build ("" for a vision encoder built alone)."""
    if isinstance(declaration, VisionEncoderModel):
        return {"vision": ""}
    if isinstance(declaration, ScaffoldComposedVlm):
        return {"vision": f"model.{declaration.tower}"}
    if isinstance(declaration, OmniModel):
        return {"vision": declaration.vision_attr, "audio": declaration.audio_attr}
    if isinstance(declaration, VlmModel):
        return {"vision": declaration.vision_attr}
    return {}


def zoo_towers() -> list[tuple[str, str]]:
    """(package, tower) of every vision and audio tower of the zoo, in package order."""
    return [(package, tower) for package in models.MODEL_PACKAGES for tower in _towers_of(parity_declaration(package))]


def is_composed(package: str) -> bool:
    """Whether ``package`` is a composed VLM (an encoder, a projector and a language model, LLaVA-style)."""
    return isinstance(parity_declaration(package), ScaffoldComposedVlm)


def _taken() -> tuple[TowerCase, ...]:
    """The first tower of each family, in package order."""
    cases: dict[str, TowerCase] = {}
    for package, tower in zoo_towers():
        if (package, tower) in FAMILY_OF:
            family, host = FAMILY_OF[package, tower]
            cases.setdefault(family, TowerCase(package, tower, family, host))
    return tuple(cases.values())


#: The tower the compile tests take of each family.
TOWERS: tuple[TowerCase, ...] = _taken()


def _batch(declaration: Any, config: Any) -> dict[str, Any]:
    """The block's batch: two images of different sizes (a Qwen-VL block then attends within two chunks), the
    encoder tests' images, one image for a composed VLM, and for Omni its audio row and its mixed row (an image,
    a video and a clip)."""
    if isinstance(declaration, VisionEncoderModel):
        return declaration.inputs(config)
    if isinstance(declaration, ScaffoldComposedVlm):
        return declaration.batch(config, (1,))
    if isinstance(declaration, OmniModel):
        rows = declaration.sample_rows()
        return declaration.omni_batch([rows["audio"], rows["mixed"]], labels=False)
    return declaration.batch(
        [
            (f"w1 {IMAGE} w2", [synthetic_image(16, 24, seed=5)], []),
            (f"w3 {IMAGE} w4", [synthetic_image(8, 16, seed=6)], []),
        ],
        labels=False,
    )


def _model(declaration: Any, config: Any) -> nn.Module:
    architecture = declaration.architecture if isinstance(declaration, VisionEncoderModel) else declaration.causal_lm
    return build_model(config, architecture=architecture)


def _blocks(tower: nn.Module) -> nn.ModuleList:
    """The tower's repeating blocks: of its lists of modules, the one holding the most parameters (a merger
    list, Qwen3-VL's deepstack mergers, is smaller than the blocks)."""
    lists = [module for module in tower.modules() if isinstance(module, nn.ModuleList) and len(module)]
    if not lists:
        raise LookupError(f"{type(tower).__name__} has no list of blocks")
    return max(lists, key=lambda blocks: sum(p.numel() for p in blocks.parameters()))


def fresh_model(case: TowerCase) -> tuple[nn.Module, dict[str, Any], nn.ModuleList]:
    """A new fp32 model of ``case``'s package in eval mode, its batch and its tower's blocks (a test may change
    them, unlike :func:`recorded`'s)."""
    declaration = parity_declaration(case.package)
    config = declaration.config()
    torch.manual_seed(0)
    model = _model(declaration, config).eval()
    path = _towers_of(declaration)[case.tower]
    return model, _batch(declaration, config), _blocks(model.get_submodule(path) if path else model)


@dataclass
class Recorded:
    """The first block of a tower, its inputs, and the same block as the whole model's forward left it."""

    #: A copy of the block taken before the forward: the block as its class defines it.
    block: nn.Module
    #: The block itself after the forward, with whatever hooks the forward hung on it and its modules.
    hooked_block: nn.Module
    #: The tower the block belongs to, and the tower's inputs in the recorded forward.
    tower: nn.Module
    tower_inputs: tuple[tuple[Any, ...], dict[str, Any]]
    #: The block's inputs: the hidden states first, then the keyword arguments the tower passes.
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@cache
def recorded(case: TowerCase, dtype: torch.dtype) -> Recorded:
    """The first block of ``case``'s tower in ``dtype`` and its recorded inputs, once per process and dtype (the
    tests of a process share it: they must not change it)."""
    declaration = parity_declaration(case.package)
    config = declaration.config()
    torch.manual_seed(0)
    model = _model(declaration, config).to(dtype).eval()
    path = _towers_of(declaration)[case.tower]
    tower = model.get_submodule(path) if path else model
    block = _blocks(tower)[0]
    pristine = copy.deepcopy(block)
    seen: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def keep(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            seen.setdefault(name, (args, kwargs))

        return hook

    hooks = [
        block.register_forward_pre_hook(keep("block"), with_kwargs=True),
        tower.register_forward_pre_hook(keep("tower"), with_kwargs=True),
    ]
    batch = {
        name: value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value
        for name, value in _batch(declaration, config).items()
    }
    try:
        with torch.no_grad(), bound_ops(OpsConfig()):
            model(**batch)
    finally:
        for hook in hooks:
            hook.remove()
    args, kwargs = seen["block"]
    if not args:  # the hidden states given by name: the step passes them first
        kwargs = dict(kwargs)
        args = (kwargs.pop("hidden_states"),)
    return Recorded(pristine, block, tower, seen["tower"], args, kwargs)


@cache
def called_slots(case: TowerCase) -> frozenset[str]:
    """The slots the block of ``case`` calls with every reference kernel bound (one eager fp32 forward)."""
    block = recorded(case, torch.float32)
    return slots_called(block.block, (block.args, block.kwargs))


#: The kernel cases of every block: no CPU kernel family serves a slot a tower block calls (a test checks it).
KERNEL_CASES: tuple[str, ...] = ("unbound", "reference")


def bound(case: TowerCase, kernels: str) -> AbstractContextManager[None]:
    """The bindings of the kernel case ``kernels`` (``unbound`` or ``reference``) for the block of ``case``."""
    assert kernels in KERNEL_CASES, kernels
    return layer_compile.bound(called_slots(case), kernels)
