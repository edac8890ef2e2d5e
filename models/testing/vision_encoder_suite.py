"""The parity suite every generated vision encoder runs (docs/vision-encoders.md), declared once per encoder.

A composed VLM builds its vision tower from ``vision_config`` alone, so an encoder is tested alone: its test file
declares a :class:`VisionEncoderModel` (the vision model_type, its config class, the class upstream's
``AutoModel`` builds for it, the slots its config guards) and subclasses :class:`VisionEncoderParitySuite`.

On a tiny fp32 config (:data:`TINY_VISION_SIZES`: pairwise-distinct sizes, eager attention, a non-default
LayerNorm epsilon) upstream's class and the generated one are built from the same weights (constant ones, the
LayerNorm weights and biases, given distinct values) and run one forward and backward of a scalar loss that
reads ``last_hidden_state`` and, for an encoder that has one, ``pooler_output`` through fixed random probes. An
encoder that takes each image's size (Pixtral, ``image_sizes``) gets a batch of images of different sizes, padded
to the config's ``image_size``. What is checked:

- with every slot eager, the outputs ``torch.equal`` to upstream's and every parameter gradient within the eager
  tolerance, in fp32 and bf16; ``pooler_output`` present exactly when the declaration says the encoder pools;
- each guarded slot's reference kernel (``modelgraft.models.testing.reference``) bound alone, in fp32 and bf16,
  and all of them at once: each kernel called, outputs and gradients within the eager tolerance;
- the slots the forward consults are exactly the declared ones, and no ``nn.LayerNorm`` nor activation module
  runs its own forward while its slot (``layer_norm``; ``activation`` or ``glu_activation``) is bound (a guard
  that silently disappears fails here);
- the registry and the loader give the generated class for the vision model_type, the class upstream's
  ``AutoModel`` builds for it (``MODEL_MAPPING_NAMES``);
- ``save_pretrained`` / ``from_pretrained`` both ways between upstream's class and the generated one, to equal
  outputs, and the generated ``from_pretrained`` strict: a checkpoint missing a weight raises, naming it.

Every test runs on one torch thread with every slot eager on entry (as the dense suite's do).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import PreTrainedConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

from modelgraft.models.checkpoint import CheckpointError
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops
from modelgraft.models.registry import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY
from modelgraft.models.testing.dense_suite import reference_kernels_bound
from modelgraft.models.testing.loading import loaded_alike
from modelgraft.models.testing.parity import (
    Tolerance,
    assert_within,
    build_generated,
    build_upstream,
    counting_calls,
    tolerance_for,
)
from modelgraft.models.testing.reference import reference_kernel, reference_kernels
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.slot_isolation import SlotIsolatedSuite
from modelgraft.models.testing.tiny import EPS_VALUES

__all__ = ["DTYPES", "TINY_VISION_SIZES", "EncoderStep", "VisionEncoderModel", "VisionEncoderParitySuite"]

#: hidden 48 = 4 heads x 12, intermediate 80, 2 layers, 28 / 7 = 4 x 4 = 16 patches (17 positions with a class
#: token), 3 channels: no two sizes that become a weight or activation dim coincide. The epsilon is no config's
#: default, so a guard that drops or hard-codes it changes the result.
TINY_VISION_SIZES: MappingProxyType[str, Any] = MappingProxyType(
    {
        "hidden_size": 48,
        "num_attention_heads": 4,
        "intermediate_size": 80,
        "num_hidden_layers": 2,
        "image_size": 28,
        "patch_size": 7,
        "num_channels": 3,
        "layer_norm_eps": EPS_VALUES[0],
        "attention_dropout": 0.0,
    }
)

#: Images per test batch.
BATCH_SIZE = 2

DTYPES = (pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16"))


@dataclass(frozen=True)
class VisionEncoderModel:
    """What differs between vision encoders, as far as their tests are concerned."""

    #: The vision model_type a VLM's ``vision_config`` names (``siglip_vision_model``), as registered.
    model_type: str
    config_class: type[PreTrainedConfig]
    #: The class upstream's ``AutoModel`` builds for ``model_type`` (``SiglipVisionModel``).
    architecture: str
    #: The slots the encoder's patch config guards.
    guarded: tuple[str, ...] = ("layer_norm", "activation")
    #: Config values on top of :data:`TINY_VISION_SIZES` (a non-default ``hidden_act``...).
    sizes: Mapping[str, Any] = field(default_factory=dict)
    #: The encoder's output has a ``pooler_output`` (SigLIP's head, CLIP's class token); Pixtral's has none.
    pooled: bool = True
    #: Each image's ``(height, width)``, passed to the forward as ``image_sizes``, for an encoder that takes images
    #: of different sizes in one padded batch (Pixtral); one per image of the batch, none larger than the config's
    #: ``image_size``. Empty: the forward gets ``pixel_values`` alone, every image of the config's size.
    image_sizes: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", MappingProxyType(dict(self.sizes)))
        object.__setattr__(self, "image_sizes", tuple(tuple(size) for size in self.image_sizes))
        if self.image_sizes and len(self.image_sizes) != BATCH_SIZE:
            raise ValueError(f"image_sizes gives {len(self.image_sizes)} sizes for a batch of {BATCH_SIZE} images")

    def config(self, **overrides: Any) -> PreTrainedConfig:
        """The tiny fp32 eager-attention vision config."""
        return self.config_class(**{**TINY_VISION_SIZES, "attn_implementation": "eager", **self.sizes, **overrides})

    def pixel_values(self, config: PreTrainedConfig, *, seed: int = 0) -> torch.Tensor:
        """A fixed batch of :data:`BATCH_SIZE` images of the config's size, fp32."""
        generator = torch.Generator().manual_seed(seed)
        shape = (BATCH_SIZE, config.num_channels, config.image_size, config.image_size)
        return torch.randn(shape, generator=generator)

    def inputs(self, config: PreTrainedConfig, *, seed: int = 0) -> dict[str, torch.Tensor]:
        """The forward's keyword inputs: :meth:`pixel_values`, and ``image_sizes`` when the encoder takes them."""
        inputs = {"pixel_values": self.pixel_values(config, seed=seed)}
        if self.image_sizes:
            largest = max(max(size) for size in self.image_sizes)
            assert largest <= config.image_size, f"an image of {largest} pixels in a batch of {config.image_size}"
            inputs["image_sizes"] = torch.tensor(self.image_sizes)
        return inputs


@dataclass(frozen=True)
class EncoderStep:
    """What one forward and backward of an encoder produced; ``grads`` maps every parameter name to its grad."""

    last_hidden_state: torch.Tensor
    #: None for an encoder without a pooled output (Pixtral).
    pooler_output: torch.Tensor | None
    grads: Mapping[str, torch.Tensor | None]


def _probe(shape: torch.Size, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def probed_loss(output: Any) -> torch.Tensor:
    """A scalar that every element of an encoder's outputs counts in: ``last_hidden_state`` and, when the encoder
    returns one, ``pooler_output``, each read through a fixed random probe (:func:`encoder_step` says why not a
    plain sum). Also the loss of the compile benchmark's encoder steps."""
    hidden, pooled = output.last_hidden_state, output.pooler_output
    loss = (hidden.float() * _probe(hidden.shape, 1)).sum()
    if pooled is not None:
        loss = loss + (pooled.float() * _probe(pooled.shape, 2)).sum()
    return loss


def encoder_step(model: PreTrainedModel, inputs: Mapping[str, torch.Tensor]) -> EncoderStep:
    """One forward and backward, from zeroed grads, of a scalar loss reading the outputs through fixed probes.

    ``inputs`` are the forward's (:meth:`VisionEncoderModel.inputs`); the pixel values are cast to the model's
    dtype. The loss reads ``last_hidden_state`` and, when the encoder returns one, ``pooler_output``. A plain sum
    would hide a wrong LayerNorm output from the gradients (its sum does not depend on the normalized values when
    the weight is uniform); random probes make every output element count.
    """
    model.zero_grad(set_to_none=True)
    seed_everything(0)
    output = model(**{**inputs, "pixel_values": inputs["pixel_values"].to(model.dtype)})
    hidden, pooled = output.last_hidden_state, output.pooler_output
    probed_loss(output).backward()
    return EncoderStep(
        last_hidden_state=hidden.detach(),
        pooler_output=None if pooled is None else pooled.detach(),
        grads={
            name: None if param.grad is None else param.grad.detach().clone()
            for name, param in model.named_parameters()
        },
    )


def assert_encoder_parity(
    upstream: EncoderStep, candidate: EncoderStep, *, tolerance: Tolerance, outputs_equal: bool
) -> None:
    """The outputs ``torch.equal`` (``outputs_equal``) or within ``tolerance``; every gradient within it."""
    for name in ("last_hidden_state", "pooler_output"):
        expected, actual = getattr(upstream, name), getattr(candidate, name)
        assert (expected is None) == (actual is None), f"{name}: only one side has one"
        if expected is None or actual is None:
            continue
        if outputs_equal:
            assert torch.equal(actual, expected), (
                f"{name} differs from upstream (max |diff| {(actual.float() - expected.float()).abs().max():.3e})"
            )
        else:
            assert_within(name, expected, actual, tolerance)
    assert set(candidate.grads) == set(upstream.grads), "parameter names differ from upstream's"
    for name, expected in upstream.grads.items():
        actual = candidate.grads[name]
        assert (expected is None) == (actual is None), f"grad of {name}: only one side has one"
        if expected is not None and actual is not None:
            assert_within(f"grad of {name}", expected, actual, tolerance)


@contextmanager
def kernels_bound(kernels: Mapping[str, Callable[..., Any]]) -> Iterator[Counter[str]]:
    """``kernels`` (slot -> function) bound for the block, the calls of each counted; every binding restored after."""
    calls: Counter[str] = Counter()
    with bound_ops(OpsConfig()):
        for slot, kernel in kernels.items():
            SLOTS[slot].bind(kernel, name=f"reference.{slot}")
        with counting_calls(calls):
            yield calls


def _is_activation_module(module: torch.nn.Module) -> bool:
    """An ``ACT2FN`` activation module (``transformers.activations``), the kind the activation slot replaces."""
    return type(module).__module__ == "transformers.activations"


class VisionEncoderParitySuite(SlotIsolatedSuite):
    """Generated vs upstream ``transformers`` for one vision encoder; subclasses set ``model``."""

    model: ClassVar[VisionEncoderModel]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "model" not in cls.__dict__:
            return
        cases = [(slot, dtype) for slot in cls.model.guarded for dtype in (torch.float32, torch.bfloat16)]
        ids = [f"{slot}-{'fp32' if dtype == torch.float32 else 'bf16'}" for slot, dtype in cases]

        @pytest.fixture(params=cases, ids=ids)
        def slot_case(self: VisionEncoderParitySuite, request: pytest.FixtureRequest) -> tuple[str, torch.dtype]:
            return request.param

        cls.slot_case = slot_case

    def _steps(
        self, dtype: torch.dtype, kernels: Mapping[str, Callable[..., Any]] | None = None
    ) -> tuple[EncoderStep, EncoderStep, Counter[str]]:
        """Upstream's step, the generated class's step (with ``kernels`` bound) and the kernels' call counts."""
        config = self.model.config()
        inputs = self.model.inputs(config)
        upstream_model = build_upstream(config, getattr(transformers, self.model.architecture), dtype=dtype)
        weights = {name: tensor.detach().clone() for name, tensor in upstream_model.state_dict().items()}
        upstream = encoder_step(upstream_model, inputs)
        pools = upstream.pooler_output is not None
        assert pools == self.model.pooled, (
            f"upstream's {self.model.architecture} returns {'a' if pools else 'no'} pooler_output, "
            f"the declaration says pooled={self.model.pooled}"
        )
        generated_cls = get_model_class(self.model.model_type, self.model.architecture)
        generated_model = build_generated(config, generated_cls, weights, dtype=dtype)
        with kernels_bound(kernels or {}) as calls:
            candidate = encoder_step(generated_model, inputs)
        return upstream, candidate, calls

    # -- registration and loading -----------------------------------------------------------
    def test_registry_returns_the_generated_class(self) -> None:
        cls = MODELING_REGISTRY.get_class(self.model.model_type, self.model.architecture)
        assert cls.__module__ == MODELING_REGISTRY.module_path(self.model.model_type)
        assert cls is not getattr(transformers, self.model.architecture)

    def test_architecture_is_the_class_upstream_automodel_builds(self) -> None:
        """The resolver of composed VLMs asks the registry for upstream's AutoModel class name."""
        assert MODEL_MAPPING_NAMES[self.model.model_type] == self.model.architecture

    def test_registry_config_class_is_upstreams(self) -> None:
        assert MODEL_CONFIG_REGISTRY[self.model.model_type] is self.model.config_class

    def test_loader_builds_the_generated_class(self) -> None:
        model = build_model(self.model.config(), architecture=self.model.architecture)
        assert type(model) is MODELING_REGISTRY.get_class(self.model.model_type, self.model.architecture)

    # -- checkpoints, both ways (tests/runtime/test_pretrained_interop.py does this for causal LMs) -------------
    def _classes(self) -> tuple[type[PreTrainedModel], type[PreTrainedModel]]:
        upstream = getattr(transformers, self.model.architecture)
        return upstream, get_model_class(self.model.model_type, self.model.architecture)

    def _outputs(self, model: PreTrainedModel) -> tuple[torch.Tensor, ...]:
        """``last_hidden_state``, and ``pooler_output`` for an encoder that pools."""
        with torch.no_grad():
            output = model.eval()(**self.model.inputs(model.config))
        if self.model.pooled:
            return output.last_hidden_state, output.pooler_output
        return (output.last_hidden_state,)

    def test_upstream_save_pretrained_loads_in_the_generated_from_pretrained_to_equal_outputs(
        self, tmp_path: Path
    ) -> None:
        upstream_cls, generated_cls = self._classes()
        source = build_upstream(self.model.config(), upstream_cls)
        source.save_pretrained(tmp_path)
        generated = generated_cls.from_pretrained(tmp_path, attn_implementation="eager")
        assert type(generated) is generated_cls
        upstream = loaded_alike(source, tmp_path, attn_implementation="eager")
        assert all(map(torch.equal, self._outputs(generated), self._outputs(upstream)))

    def test_generated_save_pretrained_loads_in_upstream_from_pretrained_to_equal_outputs(
        self, tmp_path: Path
    ) -> None:
        upstream_cls, generated_cls = self._classes()
        source = build_upstream(self.model.config(), generated_cls)
        source.save_pretrained(tmp_path)
        upstream, info = upstream_cls.from_pretrained(tmp_path, attn_implementation="eager", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        generated = loaded_alike(source, tmp_path, attn_implementation="eager")
        assert all(map(torch.equal, self._outputs(upstream), self._outputs(generated)))

    def test_generated_from_pretrained_raises_on_a_missing_weight(self, tmp_path: Path) -> None:
        upstream_cls, generated_cls = self._classes()
        build_upstream(self.model.config(), upstream_cls).save_pretrained(tmp_path)
        tensors = load_file(str(tmp_path / "model.safetensors"))
        dropped = next(key for key in sorted(tensors) if key.endswith("norm.weight"))
        del tensors[dropped]
        save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
        with pytest.raises(CheckpointError, match="missing from the checkpoint") as raised:
            generated_cls.from_pretrained(tmp_path, attn_implementation="eager")
        assert dropped in str(raised.value)

    # -- eager parity ----------------------------------------------------------------------------
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_outputs_equal_and_gradients_match_upstream_with_every_slot_eager(self, dtype: torch.dtype) -> None:
        upstream, candidate, _ = self._steps(dtype)
        assert_encoder_parity(upstream, candidate, tolerance=tolerance_for(dtype, kernels=False), outputs_equal=True)

    # -- the slot guards ---------------------------------------------------------------------------
    def test_reference_kernel_in_one_slot_matches_upstream(self, slot_case: tuple[str, torch.dtype]) -> None:
        """The slot's reference kernel, bound alone, recomputes upstream from what the guard hands it (eps,
        weight, bias, the activation's name): outputs and gradients within the eager tolerance, the kernel called."""
        slot, dtype = slot_case
        upstream, candidate, calls = self._steps(dtype, {slot: reference_kernel(slot)})
        assert calls[slot] > 0, f"the {slot} kernel was never called: its guard is missing or unreachable"
        assert_encoder_parity(upstream, candidate, tolerance=tolerance_for(dtype, kernels=False), outputs_equal=False)

    def test_reference_kernels_in_every_guarded_slot_match_upstream(self) -> None:
        upstream, candidate, calls = self._steps(torch.float32, reference_kernels(self.model.guarded))
        assert {slot for slot in self.model.guarded if calls[slot] == 0} == set()
        assert_encoder_parity(
            upstream, candidate, tolerance=tolerance_for(torch.float32, kernels=False), outputs_equal=False
        )

    def test_the_forward_consults_exactly_the_declared_slots(self) -> None:
        """Every slot bound to its counted reference kernel: the ones called are the guarded ones, no more, no fewer."""
        config = self.model.config()
        model = build_model(config, architecture=self.model.architecture)
        calls: Counter[str] = Counter()
        with torch.no_grad(), reference_kernels_bound(calls):
            model(**self.model.inputs(config))
        assert {slot for slot, count in calls.items() if count} == set(self.model.guarded)

    def test_no_guarded_module_runs_itself_while_its_slot_is_bound(self) -> None:
        """With the guarded slots bound, no ``nn.LayerNorm`` and no activation module of the built encoder runs its
        own forward: every call site goes through its slot, the pooling head's and the last norm's included.

        A gated MLP's activation module is watched when ``glu_activation`` is guarded. An RMSNorm module is not:
        its guard sits inside its own forward, which runs either way (the slot's kernel must still be called).
        """
        config = self.model.config()
        model = build_model(config, architecture=self.model.architecture)
        kinds = {
            "layer_norm": lambda m: isinstance(m, torch.nn.LayerNorm),
            "activation": _is_activation_module,
            "glu_activation": _is_activation_module,
        }
        watched = {
            name: module
            for name, module in model.named_modules()
            if any(kinds[slot](module) for slot in self.model.guarded if slot in kinds)
        }
        assert watched, "the encoder has no LayerNorm nor activation module to watch"
        ran_itself: set[str] = set()
        for name, module in watched.items():
            module.register_forward_hook(lambda module, args, out, name=name: ran_itself.add(name))
        with torch.no_grad(), kernels_bound(reference_kernels(self.model.guarded)):
            model(**self.model.inputs(config))
        assert ran_itself == set(), f"modules run outside their slot: {sorted(ran_itself)}"
