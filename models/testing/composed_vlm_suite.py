"""Parity suite of a composed (LLaVA-style) VLM: a vision encoder, a projector and a language model built from
sub-configs, image features scattered into placeholder tokens.

A model's test module subclasses :class:`ComposedVlmSuite` and sets ``model`` to a :class:`ComposedVlm`, which
builds the tiny config and the batches (its placeholder layout is the model's own). Every test compares the
generated model with upstream's from the same weights, on one image per row, several images in one row and
text-only rows, and checks what the composition promises: both towers are generated classes, every slot of the
tower and of the decoder is reached, and ``dummy_forward`` is a zero that reaches the image path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from transformers import PreTrainedConfig

from modelgraft.models.composition import sub_model_class
from modelgraft.models.loader import get_model_class
from modelgraft.models.testing.parity import build_pair, build_upstream, check_parity, tolerance_for
from modelgraft.models.testing.reference import reference_kernel, reference_kernels
from modelgraft.models.testing.slot_isolation import SlotIsolatedSuite

__all__ = ["ComposedVlm", "ComposedVlmSuite"]

#: The image layouts every composed VLM is tested on: images per row of a 2-row batch.
LAYOUTS = {"one-image-per-row": (1, 1), "several-images-in-a-row": (2, 1), "text-only": (0, 0)}


#: How the checkpoint tests load: eager attention, and upstream's per-expert loop for a MoE decoder, as the tiny
#: configs run them (its default grouped_mm is another summation order, so logits would not be bit-equal).
LOAD_OPTIONS = {"attn_implementation": "eager", "experts_implementation": "eager"}


@dataclass(frozen=True)
class ComposedVlm:
    """What differs between composed VLMs, as far as their tests are concerned.

    ``config`` builds the tiny config; ``batch(config, images_per_row)`` a training batch with that many
    images in each row (labels included); ``guarded`` the slots a training step with images reaches (tower and
    decoder together); ``tower`` the attribute of the base model holding the vision tower.
    """

    model_type: str
    architecture: str
    config: Callable[[], PreTrainedConfig]
    batch: Callable[[PreTrainedConfig, tuple[int, ...]], dict[str, Any]]
    guarded: tuple[str, ...]
    tower: str = "vision_tower"
    language_model: str = "language_model"


class ComposedVlmSuite(SlotIsolatedSuite):
    """The tests every composed VLM passes; ``model`` is set by the subclass."""

    model: ClassVar[ComposedVlm]

    def _batch(self, layout: str) -> tuple[PreTrainedConfig, Mapping[str, Any]]:
        config = self.model.config()
        return config, self.model.batch(config, LAYOUTS[layout])

    def test_towers_are_the_generated_classes_of_their_sub_configs(self) -> None:
        config = self.model.config()
        model = get_model_class(self.model.model_type, self.model.architecture)(config)
        tower = getattr(model.model, self.model.tower)
        language_model = getattr(model.model, self.model.language_model)
        assert type(tower) is sub_model_class(config.vision_config)
        assert type(language_model) is sub_model_class(config.text_config)
        assert type(tower).__module__.startswith("modelgraft.models.")
        assert type(language_model).__module__.startswith("modelgraft.models.")

    @pytest.mark.parametrize("layout", list(LAYOUTS))
    def test_training_step_matches_upstream(self, layout: str) -> None:
        """Logits equal, loss and every gradient close, with no slot bound."""
        config, batch = self._batch(layout)
        check_parity(config, self.model.architecture, batch=batch)

    def test_training_step_matches_upstream_in_bf16(self) -> None:
        config, batch = self._batch("one-image-per-row")
        check_parity(config, self.model.architecture, batch=batch, dtype=torch.bfloat16)

    def test_reference_kernels_in_every_slot_match_upstream(self) -> None:
        """Each guard, in the tower and in the decoder, hands its kernel what upstream's code would use."""
        config, batch = self._batch("one-image-per-row")
        _, candidate = check_parity(
            config,
            self.model.architecture,
            batch=batch,
            kernels=reference_kernels(self.model.guarded),
            tolerance=tolerance_for(torch.float32, kernels=False),
            logits="close",
        )
        assert set(candidate.calls) == set(self.model.guarded)

    @pytest.mark.parametrize("slot", ["layer_norm", "activation", "rms_norm"])
    def test_one_tower_slot_bound_alone_matches_upstream_in_bf16(self, slot: str) -> None:
        if slot not in self.model.guarded:
            pytest.skip(f"{self.model.architecture} guards no {slot} slot")
        config, batch = self._batch("one-image-per-row")
        check_parity(
            config,
            self.model.architecture,
            batch=batch,
            kernels={slot: reference_kernel(slot)},
            dtype=torch.bfloat16,
            tolerance=tolerance_for(torch.bfloat16, kernels=False),
            logits="close",
        )

    def test_dummy_forward_is_zero_and_reaches_what_an_image_reaches(self) -> None:
        config, batch = self._batch("one-image-per-row")
        upstream_cls = get_model_class(self.model.model_type, self.model.architecture, use_hf=True)
        generated_cls = get_model_class(self.model.model_type, self.model.architecture)
        model = build_pair(config, upstream_cls, generated_cls).generated
        model(**batch, use_cache=False).loss.backward()
        image_path = {
            name
            for name, param in model.named_parameters()
            if param.grad is not None
            and not name.startswith(f"model.{self.model.language_model}.")
            and not name.startswith("lm_head.")
        }
        model.zero_grad(set_to_none=True)
        zero = model.model.dummy_forward()
        zero.backward()
        reached = {name for name, param in model.named_parameters() if param.grad is not None}
        assert zero.item() == 0.0
        assert image_path and image_path <= reached
        assert all(not model.get_parameter(name).grad.any() for name in reached)

    def _logits(self, model: Any, batch: Mapping[str, Any]) -> torch.Tensor:
        inputs = {key: value for key, value in batch.items() if key != "labels"}
        with torch.no_grad():
            return model.eval()(**inputs, use_cache=False).logits

    def test_upstream_checkpoint_loads_in_the_generated_class_to_equal_logits(self, tmp_path: Path) -> None:
        config, batch = self._batch("one-image-per-row")
        upstream = build_upstream(config, get_model_class(self.model.model_type, self.model.architecture, use_hf=True))
        upstream.save_pretrained(tmp_path)
        generated_cls = get_model_class(self.model.model_type, self.model.architecture)
        generated = generated_cls.from_pretrained(tmp_path, **LOAD_OPTIONS)
        assert type(generated) is generated_cls
        assert torch.equal(self._logits(generated, batch), self._logits(upstream, batch))

    def test_generated_checkpoint_loads_in_upstream_with_every_key_used(self, tmp_path: Path) -> None:
        config, batch = self._batch("one-image-per-row")
        upstream_cls = get_model_class(self.model.model_type, self.model.architecture, use_hf=True)
        generated_cls = get_model_class(self.model.model_type, self.model.architecture)
        generated = build_pair(config, upstream_cls, generated_cls).generated
        generated.save_pretrained(tmp_path)
        upstream, info = upstream_cls.from_pretrained(tmp_path, output_loading_info=True, **LOAD_OPTIONS)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        assert torch.equal(self._logits(upstream, batch), self._logits(generated, batch))
