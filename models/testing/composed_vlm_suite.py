"""Parity suite of a composed (LLaVA-style) VLM: a vision encoder, a projector and a language model built from
sub-configs, image features scattered into placeholder tokens.

A model's test module subclasses :class:`ComposedVlmSuite` and sets ``model`` to a :class:`ComposedVlm`, which
builds the tiny config and the batches (its placeholder layout is the model's own). Every test compares the
generated model with upstream's from the same weights, on one image per row, several images in one row and
text-only rows, and checks what the composition promises: both towers are generated classes, every slot of the
tower and of the decoder is reached, and ``dummy_forward`` is a zero that reaches the image path.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from transformers import PreTrainedConfig

from modelgraft.models.composition import sub_model_class
from modelgraft.models.distributed.launch import spawn
from modelgraft.models.distributed.multimodal import packed_text_position_ids
from modelgraft.models.loader import get_model_class
from modelgraft.models.ops import OpsConfig, bound_ops
from modelgraft.models.ops.slots import placeholder_features_slot
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.layer_compile import check_first_layers_compile
from modelgraft.models.testing.loading import loaded_alike
from modelgraft.models.testing.parity import build_generated, build_pair, build_upstream, check_parity, tolerance_for
from modelgraft.models.testing.reference import reference_kernel, reference_kernels
from modelgraft.models.testing.slot_isolation import SlotIsolatedSuite

__all__ = ["BothWaysImageTokens", "ComposedVlm", "ComposedVlmSuite", "generated_from_upstream", "in_dtype"]

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
        assert type(tower).__module__ in MODELING_REGISTRY.module_paths()  # generated, not upstream's
        assert type(language_model).__module__ in MODELING_REGISTRY.module_paths()

    @pytest.mark.parametrize("layout", list(LAYOUTS))
    def test_training_step_matches_upstream(self, layout: str) -> None:
        """Logits equal, loss and every gradient close, with no slot bound."""
        config, batch = self._batch(layout)
        check_parity(config, self.model.architecture, batch=batch)

    def test_training_step_matches_upstream_in_bf16(self) -> None:
        config, batch = self._batch("one-image-per-row")
        check_parity(config, self.model.architecture, batch=in_dtype(batch, torch.bfloat16), dtype=torch.bfloat16)

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
            batch=in_dtype(batch, torch.bfloat16),
            kernels={slot: reference_kernel(slot)},
            dtype=torch.bfloat16,
            tolerance=tolerance_for(torch.bfloat16, kernels=False),
            logits="close",
        )

    def test_first_text_decoder_layers_trace_as_upstreams_do_and_train_compiled_as_eagerly(self) -> None:
        """``layer_compile.check_first_layers_compile`` on the language model, recorded on an image batch: its text
        model's generated module, as this VLM builds and calls it."""
        config, batch = self._batch("one-image-per-row")
        upstream_cls = get_model_class(self.model.model_type, self.model.architecture, use_hf=True)
        pair = build_pair(config, upstream_cls, get_model_class(self.model.model_type, self.model.architecture))
        check_first_layers_compile(pair.upstream, pair.generated, batch)

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
        upstream_cls = get_model_class(self.model.model_type, self.model.architecture, use_hf=True)
        source = build_upstream(config, upstream_cls)
        source.save_pretrained(tmp_path)
        generated_cls = get_model_class(self.model.model_type, self.model.architecture)
        generated = generated_cls.from_pretrained(tmp_path, **LOAD_OPTIONS)
        assert type(generated) is generated_cls
        upstream = loaded_alike(source, tmp_path, **LOAD_OPTIONS)
        assert torch.equal(self._logits(generated, batch), self._logits(upstream, batch))

    def test_generated_checkpoint_loads_in_upstream_with_every_key_used(self, tmp_path: Path) -> None:
        config, batch = self._batch("one-image-per-row")
        upstream_cls = get_model_class(self.model.model_type, self.model.architecture, use_hf=True)
        generated_cls = get_model_class(self.model.model_type, self.model.architecture)
        source = build_pair(config, upstream_cls, generated_cls).generated
        source.save_pretrained(tmp_path)
        upstream, info = upstream_cls.from_pretrained(tmp_path, output_loading_info=True, **LOAD_OPTIONS)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        generated = loaded_alike(source, tmp_path, **LOAD_OPTIONS)
        assert torch.equal(self._logits(upstream, batch), self._logits(generated, batch))


def generated_from_upstream(model: ComposedVlm, config: PreTrainedConfig) -> torch.nn.Module:
    """The generated model of ``model`` holding the weights of an upstream one built from ``config``, in eval mode."""
    upstream_cls = get_model_class(model.model_type, model.architecture, use_hf=True)
    generated_cls = get_model_class(model.model_type, model.architecture)
    return build_generated(config, generated_cls, build_upstream(config, upstream_cls).state_dict()).eval()


def in_dtype(batch: Mapping[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """The batch with its floating-point tensors (the pixels) in ``dtype``, as a user hands a bf16 model its
    processor's outputs (``BatchFeature.to(dtype)``): a tower that does not cast its input itself (Kimi-K2.5's)
    takes them as given."""
    return {
        name: value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value
        for name, value in batch.items()
    }


def _packed_row(docs: list[Mapping[str, Any]], images: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One row packing ``docs`` (each a one-row batch) end to end: every per-token input concatenated, 1-D
    positions restarting at each document, no attention mask; the image inputs of ``images`` where given."""
    length = [doc["input_ids"].shape[1] for doc in docs]
    packed: dict[str, Any] = dict(images or {})
    for key, value in docs[0].items():
        if (
            key in ("attention_mask", "labels")
            or not isinstance(value, torch.Tensor)
            or value.shape[:2]
            != (
                1,
                length[0],
            )
        ):
            continue
        packed[key] = torch.cat([doc[key] for doc in docs], dim=1)
    packed["position_ids"] = packed_text_position_ids(length)
    return packed


class BothWaysImageTokens:
    """What a composed VLM whose image tokens (or prompt prefix) attend to each other both ways keeps and refuses
    (``composed_vlm(..., sequence_parallel=False)``): sequence parallelism through the whole sequence's token
    types, FSDP alone as upstream, packed text-only rows; a packed row holding images is refused.

    Listed before the composed suite among a test class's bases: its packed-documents test, on text-only
    documents, replaces the suite's, whose packed row holds an image."""

    model: ClassVar[ComposedVlm]

    def _generated(self, config: PreTrainedConfig) -> torch.nn.Module:
        return generated_from_upstream(self.model, config)

    def _rows(self, config: PreTrainedConfig, images_per_row: tuple[int, ...]) -> list[dict[str, Any]]:
        batch = self.model.batch(config, images_per_row)
        rows = []
        for row in range(len(images_per_row)):
            rows.append({k: v[row : row + 1] for k, v in batch.items() if k not in ("labels", "attention_mask")})
        return rows

    def test_an_image_batch_with_the_slot_bound_over_whole_sequences_matches_upstream(self) -> None:
        """FSDP alone binds the placeholder_features slot with no sequence group: the image batch runs as upstream's."""
        config = self.model.config()
        batch = {k: v for k, v in self.model.batch(config, LAYOUTS["one-image-per-row"]).items() if k != "labels"}
        model = self._generated(config)
        upstream_cls = get_model_class(self.model.model_type, self.model.architecture, use_hf=True)
        upstream = build_upstream(config, upstream_cls).eval()
        with torch.no_grad():
            expected = upstream(**batch).logits
            with bound_ops(OpsConfig()):
                placeholder_features_slot.bind(reference_kernel("placeholder_features"), name="reference")
                got = model(**batch).logits
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)

    def test_an_image_batch_split_over_two_sequence_ranks_matches_one_process(self) -> None:
        """SP=2 (Ulysses, the tower on both ranks), two images in a row (gemma3's: one in each rank's slice): the
        forward gathers the token types its mask reads into the whole sequence's, so Ulysses' mask of the whole
        sequence has each image's block as one process has it: logits, loss and every gradient."""
        spawn(
            an_image_batch_split_over_sequence_ranks_matches_one_process,
            2,
            type(self).__module__,
            type(self).__qualname__,
            timeout=150.0,
        )

    def test_a_packed_row_holding_images_is_refused(self) -> None:
        config = self.model.config()
        (text,) = self._rows(config, (0,))
        (image,) = self._rows(config, (1,))
        pixels = {k: v for k, v in image.items() if k not in text}
        model = self._generated(config)
        with torch.no_grad(), pytest.raises(ValueError, match="packs documents holds images"):
            model(**_packed_row([text, image], pixels))

    def test_packed_documents_each_get_the_logits_they_get_alone(self) -> None:
        """Two text-only documents in one row, 1-D positions restarting at each and no attention mask, with the
        config's use_cache on: each gets the logits it gets alone (the forward turns the cache off)."""
        config = self.model.config()
        docs = self._rows(config, (0, 0))
        model = self._generated(config)
        with torch.no_grad():
            together = model(**_packed_row(docs)).logits[0]
            alone = [model(**doc).logits[0] for doc in docs]
        assert model.config.text_config.use_cache
        start = 0
        for logits in alone:
            torch.testing.assert_close(together[start : start + len(logits)], logits, rtol=1e-5, atol=1e-5)
            start += len(logits)


def an_image_batch_split_over_sequence_ranks_matches_one_process(module: str, suite: str) -> None:
    """On each of 2 ranks of one sequence-parallel group (the whole world): the suite's model, attached to the
    group, takes this rank's slice of a batch with two images in a row and gives one process's logits at real
    tokens, loss and (averaged) gradients."""
    from modelgraft.models.distributed import (
        ParallelState,
        attach_parallel,
        average_gradients,
        full_state,
        gather_sequence,
        shard_multimodal,
    )
    from modelgraft.models.testing.seed import seed_everything

    model: ComposedVlm = getattr(importlib.import_module(module), suite).model
    state = ParallelState.build(sp=2)
    config = model.config()
    batch = model.batch(config, LAYOUTS["several-images-in-a-row"])
    architecture = get_model_class(model.model_type, model.architecture)

    seed_everything(0)
    reference = architecture(config)
    expected = reference(**batch)
    expected.loss.backward()

    seed_everything(0)
    parallel = architecture(config)
    attach_parallel(parallel, state)
    rows, length = batch["input_ids"].shape
    positions = torch.arange(length).expand(rows, length)
    local = shard_multimodal({**batch, "position_ids": positions}, state, pad_token_id=config.text_config.pad_token_id)
    out = parallel(**local)
    real = batch["attention_mask"].bool()
    logits = gather_sequence(out.logits, state, length=length)
    torch.testing.assert_close(logits[real], expected.logits[real], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.loss, expected.loss, rtol=1e-5, atol=1e-6)
    out.loss.backward()
    average_gradients(parallel, state)
    grads = full_state(parallel, state, grads=True)
    for name, param in reference.named_parameters():
        if param.grad is None:
            assert grads.get(name) is None or not grads[name].any(), name
        else:
            torch.testing.assert_close(
                grads[name], param.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}"
            )
