"""The VLM suite's checks of ``get_metadata_collate_func()``: the collator step precomputing the vision metadata.

The pinned transformers computes the vision tower's ``cu_seqlens``, ``max_seqlen`` and patch position ids from the
grids in every forward and takes them precomputed as ``image_*`` / ``video_*`` keyword arguments
(``modelgraft.models.vision_metadata``). What is checked, per model: the step adds exactly those keys for the
modalities a batch has; the model fed them gives the logits, loss and gradients it gives without them
(``torch.equal``), also for a video of several temporal patches (one attention segment per frame); the model
reads them (wrong ones change the logits, so the equality is not one of keys nobody reads); ``max_seqlen`` is
what flash attention would have computed; and the step pickles into a spawned worker.

:class:`VisionMetadataChecks` is a base of :class:`~modelgraft.models.testing.vlm_suite.VlmParitySuite`, so every
VLM of the zoo runs them.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch
from transformers.utils.generic import get_max_seqlen

from modelgraft.models.loader import build_model
from modelgraft.models.testing.parity import run_step
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.spawned import run_in_spawned_worker
from modelgraft.models.testing.vlm_processor import synthetic_image, synthetic_video
from modelgraft.models.vision_metadata import GRIDS, METADATA_KEYS

if TYPE_CHECKING:
    from modelgraft.models.testing.vlm_suite import VlmModel

__all__ = ["VisionMetadataChecks", "metadata_keys", "same_value"]

_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
_VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"


def metadata_keys(*modalities: str) -> set[str]:
    """The keys the step adds for ``modalities``: ``<modality>_cu_seqlens``, ``_max_seqlen``, ``_position_ids``."""
    return {f"{modality}_{name}" for modality in modalities for name in METADATA_KEYS}


def _collate_in_worker(payload: bytes) -> dict[str, Any]:
    """In a spawned process: unpickle the step and a batch, return the step's result."""
    step, batch = pickle.loads(payload)
    return step(batch)


def same_value(a: Any, b: Any) -> bool:
    """Equal tensors (torch.equal) or equal plain values."""
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


class VisionMetadataChecks:
    """Checks of the collator step of ``model``'s VLM (a :class:`VlmModel`); mixed into the VLM suite."""

    model: VlmModel

    def _collate_func(self, backend: str) -> Any:
        return build_model(
            self.model.config(), architecture=self.model.causal_lm, backend=backend
        ).get_metadata_collate_func()

    def _long_video_batch(self) -> dict[str, Any]:
        """An image row and a 6-frame video (3 temporal patches: three attention segments of one video)."""
        return self.model.batch(
            [
                (f"w1 {_IMAGE} w2", [synthetic_image(16, 24, seed=7)], []),
                (f"w3 {_VIDEO} w4 w5", [], [synthetic_video(16, 8, frames=6, seed=8)]),
            ]
        )

    def _step(self, backend: str, batch: Mapping[str, Any], *, metadata: bool) -> Any:
        seed_everything(0)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend).train()
        if metadata:
            batch = model.get_metadata_collate_func()(batch)
        return run_step(model, batch)

    def _assert_same_step(self, backend: str, batch: Mapping[str, Any]) -> None:
        plain, precomputed = self._step(backend, batch, metadata=False), self._step(backend, batch, metadata=True)
        assert torch.equal(precomputed.logits, plain.logits)
        assert torch.equal(precomputed.loss, plain.loss)
        for name, grad in plain.grads.items():
            assert same_value(precomputed.grads[name], grad), name

    def test_metadata_step_adds_the_vision_keys_of_the_modalities_in_the_batch(self, backend: str) -> None:
        step = self._collate_func(backend)
        batch = self.model.multimodal_batch()
        collated = step(batch)
        assert set(collated) - set(batch) == metadata_keys("image", "video")
        assert all(same_value(collated[key], value) for key, value in batch.items())
        images_only = self.model.some_rows_with_images_batch()
        assert set(step(images_only)) - set(images_only) == metadata_keys("image")
        text_only = self.model.text_only_batch()
        assert set(step(text_only)) == set(text_only)

    def test_metadata_step_counts_one_segment_per_frame_and_a_position_per_patch(self, backend: str) -> None:
        batch = self._long_video_batch()
        collated = self._collate_func(backend)(batch)
        for modality, grids_key in GRIDS.items():
            grids = batch[grids_key]
            frames = [int(h * w) for t, h, w in grids.tolist() for _ in range(t)]
            cu_seqlens = collated[f"{modality}_cu_seqlens"]
            assert cu_seqlens.dtype == torch.int32
            assert cu_seqlens.tolist() == [sum(frames[:i]) for i in range(len(frames) + 1)]
            assert collated[f"{modality}_max_seqlen"] == max(frames)
            assert tuple(collated[f"{modality}_position_ids"].shape) == (sum(frames), 2)
        assert batch["video_grid_thw"][:, 0].tolist() == [3]  # the video really has several segments

    def test_max_seqlen_is_what_flash_attention_computes(self, backend: str) -> None:
        """Other attention implementations split by cu_seqlens; flash attention reads max_seqlen."""
        collated = self._collate_func(backend)(self._long_video_batch())
        flash = SimpleNamespace(_attn_implementation="flash_attention_2")
        for modality in GRIDS:
            expected = get_max_seqlen(collated[f"{modality}_cu_seqlens"], flash)
            assert collated[f"{modality}_max_seqlen"] == expected

    def test_model_fed_the_metadata_gives_the_same_step_on_images_and_videos(self, backend: str) -> None:
        self._assert_same_step(backend, self.model.multimodal_batch())

    def test_model_fed_the_metadata_gives_the_same_step_on_a_video_of_several_frames(self, backend: str) -> None:
        self._assert_same_step(backend, self._long_video_batch())

    def test_model_reads_the_precomputed_metadata(self, backend: str) -> None:
        """Wrong metadata changes the logits: the equal steps above are the metadata's doing, not keys ignored."""
        batch = self.model.multimodal_batch(labels=False)
        seed_everything(0)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend).eval()
        collated = model.get_metadata_collate_func()(batch)
        with torch.no_grad():
            expected = model(**collated).logits
            for modality in GRIDS:
                one_segment = {**collated}
                total = collated[f"{modality}_cu_seqlens"][-1:]
                one_segment[f"{modality}_cu_seqlens"] = torch.cat([total.new_zeros(1), total])
                assert not torch.equal(model(**one_segment).logits, expected), f"{modality}_cu_seqlens unread"
                no_positions = {**collated}
                no_positions[f"{modality}_position_ids"] = torch.zeros_like(collated[f"{modality}_position_ids"])
                assert not torch.equal(model(**no_positions).logits, expected), f"{modality}_position_ids unread"

    def test_metadata_step_pickles_and_runs_in_a_spawned_worker(self, backend: str) -> None:
        step = self._collate_func(backend)
        batch = self.model.multimodal_batch()
        payload = pickle.dumps((step, batch))
        actual = run_in_spawned_worker(_collate_in_worker, payload)
        expected = step(batch)
        assert set(actual) == set(expected)
        assert all(same_value(actual[key], value) for key, value in expected.items())

    def test_metadata_step_of_the_base_model_is_the_same_function(self, backend: str) -> None:
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        ours, base = model.get_metadata_collate_func(), model.model.get_metadata_collate_func()
        assert (ours.func, ours.args) == (base.func, base.args)
