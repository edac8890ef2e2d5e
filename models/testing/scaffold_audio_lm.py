"""The parity suite of a scaffolded audio language model: an audio tower, a projector and a language model built
from sub-configs, audio features scattered into placeholder tokens (docs/scaffolding.md, "Audio language models").

A scaffold (``copier copy``, category ``omni``, a composed audio model such as GLM-ASR) is written for a model no one
has sized by hand: :class:`ScaffoldAudioLm` derives the tiny config, the processor and the batches from the model's
own config and processor classes at run time (``modelgraft.models.testing.audio_lm_batches``). Every test compares
the generated model with upstream's from the same weights, on a batch of two clips, a text-only batch and a batch
with one clip and one text-only row, and checks what the composition promises: both towers are generated classes,
every slot the built model consults is reached, ``dummy_forward`` is a zero that reaches the audio path, each half
of a sequence split over two sequence-parallel ranks scatters the features of its own placeholders, and packed
documents keep apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from transformers import PreTrainedConfig, ProcessorMixin

from modelgraft.models.composition import sub_model_class
from modelgraft.models.distributed.multimodal import packed_text_position_ids
from modelgraft.models.loader import get_model_class
from modelgraft.models.ops import bound_ops
from modelgraft.models.ops.binding import consulted_slots
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing.audio_lm_batches import AudioLmBatches
from modelgraft.models.testing.composed_vlm_suite import LOAD_OPTIONS, in_dtype
from modelgraft.models.testing.gated_delta_net_suite import packed_document_kwargs, packed_document_ops
from modelgraft.models.testing.layer_compile import check_first_layers_compile
from modelgraft.models.testing.loading import loaded_alike
from modelgraft.models.testing.parity import (
    _kernels_bound,
    build_generated,
    build_pair,
    build_upstream,
    check_parity,
    tolerance_for,
)
from modelgraft.models.testing.reference import reference_kernels, training_step_slots
from modelgraft.models.testing.scaffold_composed import assert_each_half_scatters_its_own_placeholders
from modelgraft.models.testing.scaffold_vlm import KEPT_UPSTREAM_PACKAGES, generated_modules
from modelgraft.models.testing.slot_isolation import SlotIsolatedSuite

__all__ = ["LAYOUTS", "ScaffoldAudioLm", "ScaffoldAudioLmSuite"]

#: The batches every audio language model is tested on (``AudioLmBatches.batch``): a clip in each of two rows, two
#: text-only rows, one row with a clip beside one without.
LAYOUTS = ("audio", "text", "mixed")


@dataclass(frozen=True)
class ScaffoldAudioLm:
    """What a scaffolded audio language model's tests need: its registered type, its classes and what it guards.

    ``guarded`` are the slots the scaffold's recipe guards in the module itself (the audio encoder's and the
    projector's, and the loss head); ``tower`` and ``language_model`` the attributes of the ``<Prefix>Model``.
    """

    model_type: str
    config_class: type[PreTrainedConfig]
    processor_class: type[ProcessorMixin]
    causal_lm: str
    guarded: tuple[str, ...]
    tower: str = "audio_tower"
    language_model: str = "language_model"

    @cached_property
    def batches(self) -> AudioLmBatches:
        return AudioLmBatches(self.config_class, self.processor_class)

    def config(self) -> PreTrainedConfig:
        """The tiny config (a fresh one each call: tests may change it)."""
        return self.batches.config()

    def batch(self, layout: str) -> dict[str, Any]:
        """A training batch of ``layout`` (one of :data:`LAYOUTS`), labels included, for :meth:`config`."""
        return self.batches.batch(layout)


class ScaffoldAudioLmSuite(SlotIsolatedSuite):
    """The tests every scaffolded audio language model passes; ``scaffold`` is set by the test class."""

    scaffold: ClassVar[ScaffoldAudioLm]
    model: ClassVar[ScaffoldAudioLm]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "scaffold" in cls.__dict__:  # the declaration as every suite names it (declarations.parity_suite_class)
            cls.model = cls.scaffold

    @property
    def _architecture(self) -> str:
        return self.scaffold.causal_lm

    def _classes(self) -> tuple[type, type]:
        upstream = get_model_class(self.scaffold.model_type, self._architecture, use_hf=True)
        return upstream, get_model_class(self.scaffold.model_type, self._architecture)

    def _generated_from_upstream(self, config: PreTrainedConfig) -> torch.nn.Module:
        upstream_cls, generated_cls = self._classes()
        return build_generated(config, generated_cls, build_upstream(config, upstream_cls).state_dict()).eval()

    def test_towers_are_the_generated_classes_of_their_sub_configs(self) -> None:
        """The audio tower is this module's generated encoder, the language model the class registered for the text
        config's model_type; neither is upstream's."""
        config = self.scaffold.config()
        model = self._classes()[1](config)
        for attr, sub_config in ((self.scaffold.tower, "audio_config"), (self.scaffold.language_model, "text_config")):
            cls = type(getattr(model.model, attr))
            assert cls.__module__ in MODELING_REGISTRY.module_paths(), (attr, cls)
            assert cls is sub_model_class(getattr(config, sub_config)), (attr, cls)

    def test_every_module_is_generated_or_deliberately_left_upstream(self) -> None:
        """Every module of a built model is a class of this generated module or of the one registered for its text
        config's type, a torch layer or a transformers activation module (``KEPT_UPSTREAM_PACKAGES``)."""
        config = self.scaffold.config()
        model = self._classes()[1](config)
        generated = generated_modules(config, self.scaffold.model_type, "gpu")
        outside = {
            f"{type(sub).__module__}.{type(sub).__qualname__}"
            for sub in model.modules()
            if type(sub).__module__ not in generated
        }
        assert {name for name in outside if not name.startswith(KEPT_UPSTREAM_PACKAGES)} == set()

    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_training_step_matches_upstream(self, layout: str) -> None:
        """Logits equal, loss and every gradient close, with no slot bound."""
        check_parity(self.scaffold.config(), self._architecture, batch=self.scaffold.batch(layout))

    def test_training_step_matches_upstream_in_bf16(self) -> None:
        batch = in_dtype(self.scaffold.batch("audio"), torch.bfloat16)
        check_parity(self.scaffold.config(), self._architecture, batch=batch, dtype=torch.bfloat16)

    def test_reference_kernels_in_every_slot_match_upstream(self) -> None:
        """Every slot the built model consults bound to its reference kernel, each one called: the module's own
        guards (the audio encoder's, the projector's, the loss head's) and the language model's package's; the step
        still equals upstream's."""
        config = self.scaffold.config()
        model = self._classes()[1](config)
        slots = training_step_slots(model)
        assert consulted_slots(getattr(model.model, self.scaffold.tower)), "the audio tower consults no op slot"
        assert set(self.scaffold.guarded) <= slots, set(self.scaffold.guarded) - slots
        _, candidate = check_parity(
            config,
            self._architecture,
            batch=self.scaffold.batch("audio"),
            kernels=reference_kernels(sorted(slots)),
            tolerance=tolerance_for(torch.float32, kernels=False),
            logits="close",
        )
        assert set(candidate.calls) == slots

    def test_each_tower_slot_bound_alone_matches_upstream_in_bf16(self) -> None:
        """Each slot the audio tower consults, bound alone to its reference kernel in bf16: the tower hands it what
        upstream's code uses."""
        config = self.scaffold.config()
        model = self._classes()[1](config)
        slots = sorted(consulted_slots(getattr(model.model, self.scaffold.tower)))
        assert slots, "the audio tower consults no op slot"
        batch = in_dtype(self.scaffold.batch("audio"), torch.bfloat16)
        for slot in slots:
            check_parity(
                config,
                self._architecture,
                batch=batch,
                kernels=reference_kernels([slot]),
                dtype=torch.bfloat16,
                tolerance=tolerance_for(torch.bfloat16, kernels=False),
                logits="close",
            )

    def test_first_text_decoder_layers_trace_as_upstreams_do_and_train_compiled_as_eagerly(self) -> None:
        """``layer_compile.check_first_layers_compile`` on the language model, recorded on an audio batch: its text
        model's generated module, as this model builds and calls it."""
        upstream_cls, generated_cls = self._classes()
        pair = build_pair(self.scaffold.config(), upstream_cls, generated_cls)
        check_first_layers_compile(pair.upstream, pair.generated, self.scaffold.batch("audio"))

    def test_dummy_forward_is_zero_and_reaches_what_a_clip_reaches(self) -> None:
        upstream_cls, generated_cls = self._classes()
        model = build_pair(self.scaffold.config(), upstream_cls, generated_cls).generated
        model(**self.scaffold.batch("audio"), use_cache=False).loss.backward()
        audio_path = {
            name
            for name, param in model.named_parameters()
            if param.grad is not None
            and not name.startswith(f"model.{self.scaffold.language_model}.")
            and not name.startswith("lm_head.")
        }
        model.zero_grad(set_to_none=True)
        zero = model.model.dummy_forward()
        zero.backward()
        reached = {name for name, param in model.named_parameters() if param.grad is not None}
        assert zero.item() == 0.0
        assert audio_path and audio_path <= reached, audio_path - reached
        assert all(not model.get_parameter(name).grad.any() for name in reached)

    def test_a_text_only_batch_runs_the_dummy_clip_where_the_placeholder_slot_is_bound(self) -> None:
        """With the placeholder_features slot bound (as sequence parallelism binds it), a batch without audio runs
        ``dummy_forward``: every parameter of the audio path gets a gradient, zero, and the loss is upstream's."""
        config = self.scaffold.config()
        model = self._generated_from_upstream(config)
        batch = self.scaffold.batch("text")
        with torch.no_grad():
            expected = model(**batch, use_cache=False).loss
        with _kernels_bound({"placeholder_features": lambda mask, features: features}):
            loss = model(**batch, use_cache=False).loss
        loss.backward()
        tower = getattr(model.model, self.scaffold.tower)
        trained = [p for p in tower.parameters() if p.requires_grad]  # a frozen position table gets none
        assert trained and all(p.grad is not None and not p.grad.any() for p in trained)
        assert torch.equal(loss.detach(), expected)

    def _logits(self, model: Any, batch: Mapping[str, Any]) -> torch.Tensor:
        inputs = {key: value for key, value in batch.items() if key != "labels"}
        with torch.no_grad():
            return model.eval()(**inputs, use_cache=False).logits

    def test_upstream_checkpoint_loads_in_the_generated_class_to_equal_logits(self, tmp_path: Path) -> None:
        upstream_cls, generated_cls = self._classes()
        source = build_upstream(self.scaffold.config(), upstream_cls)
        source.save_pretrained(tmp_path)
        generated = generated_cls.from_pretrained(tmp_path, **LOAD_OPTIONS)
        assert type(generated) is generated_cls
        upstream = loaded_alike(source, tmp_path, **LOAD_OPTIONS)
        batch = self.scaffold.batch("audio")
        assert torch.equal(self._logits(generated, batch), self._logits(upstream, batch))

    def test_generated_checkpoint_loads_in_upstream_with_every_key_used(self, tmp_path: Path) -> None:
        upstream_cls, generated_cls = self._classes()
        source = build_pair(self.scaffold.config(), upstream_cls, generated_cls).generated
        source.save_pretrained(tmp_path)
        upstream, info = upstream_cls.from_pretrained(tmp_path, output_loading_info=True, **LOAD_OPTIONS)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        generated = loaded_alike(source, tmp_path, **LOAD_OPTIONS)
        batch = self.scaffold.batch("audio")
        assert torch.equal(self._logits(upstream, batch), self._logits(generated, batch))

    def test_each_half_of_the_sequence_scatters_the_audio_features_of_its_own_placeholders(self) -> None:
        """Sequence parallelism of two ranks, in one process: with the placeholder_features slot bound to a kernel
        that keeps the features of one half's placeholders (as the sp kernel does from the ranks' masks), each half
        of the ids, with the whole batch's clips, hands its language model that half of the embeddings the whole
        sequence gets, through upstream's own get_placeholder_mask and scatter."""
        config = self.scaffold.config()
        model = self._generated_from_upstream(config)
        language_model = getattr(model.model, self.scaffold.language_model)
        assert_each_half_scatters_its_own_placeholders(
            model, language_model, self.scaffold.batch("audio"), config.audio_token_id
        )

    def test_packed_documents_each_get_the_logits_they_get_alone(self) -> None:
        """A row packing a text-only document and a document with a clip, 1-D positions restarting at each and no
        attention mask, with the config's use_cache on: each document's logits are those it gets alone (the
        generated forward turns the cache off, so the language model's mask builder sees the documents)."""
        config = self.scaffold.config()
        mixed = self.scaffold.batch("mixed")
        clip_row, text_row = _rows_by_audio(mixed, config.audio_token_id)
        # The processor gives features per clip, not per row: the mixed batch's one clip is the clip row's.
        audio_inputs = {key: value for key, value in mixed.items() if key not in _TOKEN_KEYS}
        docs = [_trimmed(mixed, text_row), {**_trimmed(mixed, clip_row), **audio_inputs}]
        generated = self._generated_from_upstream(config)
        lengths = [doc["input_ids"].shape[1] for doc in docs]
        packed = dict(audio_inputs)
        packed["input_ids"] = torch.cat([doc["input_ids"] for doc in docs], dim=1)
        packed["position_ids"] = packed_text_position_ids(lengths)
        boundaries = packed_document_kwargs(config.get_text_config(), lengths)
        with torch.no_grad():
            alone = [generated(**doc).logits[0] for doc in docs]
            with bound_ops(packed_document_ops(config.get_text_config())):
                together = generated(**packed, **boundaries).logits
        assert generated.config.get_text_config().use_cache
        torch.testing.assert_close(together[0, : lengths[0]], alone[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(together[0, lengths[0] :], alone[1], rtol=1e-5, atol=1e-5)


#: The per-token inputs of a batch; the others (the clips, their frame masks) belong to the audio.
_TOKEN_KEYS = frozenset({"input_ids", "attention_mask", "labels", "position_ids"})


def _rows_by_audio(batch: Mapping[str, Any], audio_token_id: int) -> tuple[int, int]:
    """(the row holding audio placeholders, the row holding none) of a two-row batch."""
    holds = (batch["input_ids"] == audio_token_id).any(dim=1).tolist()
    assert sorted(holds) == [False, True], f"expected one row with a clip and one without: {holds}"
    return holds.index(True), holds.index(False)


def _trimmed(batch: Mapping[str, Any], row: int) -> dict[str, torch.Tensor]:
    """Row ``row``'s token ids without its padding, as a one-row document."""
    keep = batch["attention_mask"][row].bool()
    return {"input_ids": batch["input_ids"][row][keep].unsqueeze(0)}
