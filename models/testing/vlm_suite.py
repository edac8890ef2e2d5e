"""The parity suite every VLM runs (docs/adding-a-model.md, "VLMs"), declared once per model.

A model's test file declares a :class:`VlmModel` (config and processor classes, tiny text and vision sizes, the
patch config that lists what it leaves as upstream's) and subclasses :class:`VlmParitySuite`. The batches come
from the model's own processor, built locally (``modelgraft.models.testing.vlm_processor``): a synthetic image and
a 2-frame video, text-only rows, rows with and without images.

What is checked, against upstream ``transformers`` with the same weights: logits ``torch.equal`` and loss and
every gradient within the eager tolerance, fp32 and bf16, with every slot eager; each guarded slot's reference
kernel bound alone (fp32 and bf16) and all at once, each called (``check_parity``'s call counter); the chunked
loss and ``logits_to_keep``; ``from_pretrained`` / ``save_pretrained`` both ways; the vision ``dummy_forward``;
the position-id function against upstream's ``get_rope_index`` (per document of a packed row too), pickled into
a spawned worker; a packed row of two documents through the model, each document's logits upstream's for it alone
(docs/distributed.md, "Packed documents in a VLM or Omni row"); a caller's ``shift_labels`` reaching the bound loss
kernel; no ``nn.LayerNorm`` running outside the ``layer_norm`` slot; the collator step of
``get_metadata_collate_func`` (``vlm_metadata_checks``); and the module tree of the built model, every module a
generated class or one the config leaves as upstream's on purpose.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import PreTrainedConfig, PreTrainedModel, ProcessorMixin

from modelgraft.models.checkpoint import CheckpointError
from modelgraft.models.distributed.multimodal import packed_position_ids
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops
from modelgraft.models.ops.kernels.loss_inputs import shift_causal_labels
from modelgraft.models.processors import build_processor
from modelgraft.models.registry import MODEL_CONFIG_REGISTRY, MODEL_PROCESSOR_REGISTRY, MODELING_REGISTRY
from modelgraft.models.testing.batches import IGNORE_INDEX
from modelgraft.models.testing.dense_suite import CHUNKED_LOSS
from modelgraft.models.testing.gated_delta_net_suite import packed_document_kwargs, packed_document_ops
from modelgraft.models.testing.layer_compile import check_first_layers_compile
from modelgraft.models.testing.loading import loaded_alike
from modelgraft.models.testing.parity import (
    ModelPair,
    Tolerance,
    build_pair,
    check_parity,
    eager_slots_on_one_thread,
    tolerance_for,
)
from modelgraft.models.testing.reference import reference_kernel, reference_kernels
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.spawned import run_in_spawned_worker
from modelgraft.models.testing.vlm_metadata_checks import VisionMetadataChecks
from modelgraft.models.testing.vlm_processor import (
    QWEN_VL_SPECIAL_TOKENS,
    synthetic_image,
    synthetic_video,
    tiny_tokenizer,
)

__all__ = ["DTYPES", "VlmModel", "VlmParitySuite", "module_classes_outside"]

DTYPES = (pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16"))

#: Image-processor bounds: images keep their tiny sizes (the resize factor is patch * merge = 8).
MIN_PIXELS, MAX_PIXELS = 8 * 8, 32 * 32


@dataclass(frozen=True)
class VlmModel:
    """What differs between VLMs, as far as their tests are concerned."""

    model_type: str
    config_class: type[PreTrainedConfig]
    processor_class: type[ProcessorMixin]
    #: The slow (PIL) image processor class; its patch, merge and temporal sizes come from ``vision_config``.
    image_processor_class: type
    #: The conditional-generation class (the model's training head) and the base model class.
    causal_lm: str
    base_model: str
    #: The dotted module of the patch config, whose ``KEPT_UPSTREAM_MODULES`` the module-tree test reads.
    patch_config: str
    text_config: Mapping[str, Any]
    vision_config: Mapping[str, Any]
    #: Top-level config values on top of the sizes and the special-token ids.
    sizes: Mapping[str, Any] = field(default_factory=dict)
    guarded: tuple[str, ...] = ("rms_norm", "glu_activation", "rope", "rope_vision", "causal_lm_loss")
    backends: tuple[str, ...] = ("gpu",)
    #: Attribute path of the vision model from the conditional-generation class.
    vision_attr: str = "model.visual"

    def __post_init__(self) -> None:
        for name in ("text_config", "vision_config", "sizes"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @cached_property
    def tokenizer(self) -> Any:
        return tiny_tokenizer()

    def token_id(self, token: str) -> int:
        return self.tokenizer.convert_tokens_to_ids(token)

    def processor(self) -> ProcessorMixin:
        """The model's own processor class over the tiny tokenizer and the PIL image processor."""
        vision = self.vision_config
        image_processor = self.image_processor_class(
            patch_size=vision["patch_size"],
            merge_size=vision["spatial_merge_size"],
            temporal_patch_size=vision["temporal_patch_size"],
            min_pixels=MIN_PIXELS,
            max_pixels=MAX_PIXELS,
        )
        return build_processor(self.processor_class, image_processor=image_processor, tokenizer=self.tokenizer)

    def config(self, **overrides: Any) -> PreTrainedConfig:
        """The tiny config: fp32, eager attention, the tokenizer's vocabulary and vision token ids."""
        start, end, image, video = (self.token_id(token) for token in QWEN_VL_SPECIAL_TOKENS)
        text = {"vocab_size": len(self.tokenizer), "pad_token_id": 0, "bos_token_id": None, "eos_token_id": 2}
        return self.config_class(
            **{
                "text_config": {**text, "attention_dropout": 0.0, **self.text_config},
                "vision_config": dict(self.vision_config),
                "vision_start_token_id": start,
                "vision_end_token_id": end,
                "image_token_id": image,
                "video_token_id": video,
                "attn_implementation": "eager",
                **self.sizes,
                **overrides,
            }
        )

    def load_options(self) -> dict[str, Any]:
        """What ``from_pretrained`` is told, as :meth:`config` builds it: implementations a checkpoint does not save."""
        return {"attn_implementation": "eager"}

    # -- batches through the processor ---------------------------------------------------------------
    def batch(self, rows: list[tuple[str, list[Any], list[Any]]], *, labels: bool = True) -> dict[str, Any]:
        """The processor's tensors for ``rows`` of (text, images, videos), right-padded, with labels.

        Labels ignore padding and the vision placeholders (what a trainer does); ``mm_token_type_ids`` is
        asked for, as the model needs it to compute the multimodal positions.
        """
        images = [image for _, row_images, _ in rows for image in row_images]
        videos = [video for _, _, row_videos in rows for video in row_videos]
        features = self.processor()(
            text=[text for text, _, _ in rows],
            images=images or None,
            videos=videos or None,
            return_tensors="pt",
            padding=True,
            return_mm_token_type_ids=True,
        )
        batch = dict(features)
        if labels:
            ignored = (batch["attention_mask"] == 0) | (batch["mm_token_type_ids"] != 0)
            batch["labels"] = batch["input_ids"].masked_fill(ignored, IGNORE_INDEX)
        return batch

    def multimodal_batch(self, *, labels: bool = True) -> dict[str, Any]:
        """An image row, a 2-frame video row, a padded text-only row, and a row with both (other sizes)."""
        return self.batch(
            [
                (f"w1 w2 {IMAGE} w3 w4", [synthetic_image(16, 24, seed=1)], []),
                (f"w5 {VIDEO} w6", [], [synthetic_video(16, 16, seed=2)]),
                ("w7 w8 w9", [], []),
                (f"w10 {IMAGE} w11 {VIDEO} w12", [synthetic_image(8, 16, seed=3)], [synthetic_video(8, 8, seed=4)]),
            ],
            labels=labels,
        )

    def text_only_batch(self) -> dict[str, Any]:
        return self.batch([("w1 w2 w3 w4 w5 w6", [], []), ("w7 w8 w9", [], []), ("w10 w11 w12 w13", [], [])])

    def some_rows_with_images_batch(self) -> dict[str, Any]:
        """Images in the first and third rows only."""
        return self.batch(
            [
                (f"w1 {IMAGE} w2", [synthetic_image(16, 24, seed=5)], []),
                ("w3 w4 w5 w6 w7", [], []),
                (f"w8 w9 {IMAGE}", [synthetic_image(16, 16, seed=6)], []),
                ("w10 w11", [], []),
            ]
        )


IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"


def _attribute(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def module_classes_outside(model: torch.nn.Module, module_name: str) -> set[str]:
    """The dotted classes of ``model``'s modules that are not defined in the module ``module_name``."""
    return {
        f"{type(sub).__module__}.{type(sub).__qualname__}"
        for sub in model.modules()
        if type(sub).__module__ != module_name
    }


#: The towers' pixel inputs of a batch: images, then videos.
_PIXELS = ("pixel_values", "pixel_values_videos")

#: A tensor no model has, added to a checkpoint (no conversion mapping renames it).
PROBE_KEY = "model.interop_probe.weight"


def _saved_keys(folder: Path) -> set[str]:
    keys: set[str] = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            keys.update(handle.keys())
    return keys


def _rewrite_checkpoint(folder: Path, *, drop: str, add: str) -> None:
    """Drop one tensor of the single-file checkpoint save_pretrained wrote and add an unknown one."""
    file = folder / "model.safetensors"
    tensors = load_file(str(file))
    del tensors[drop]
    tensors[add] = torch.zeros(3)
    save_file(tensors, str(file), metadata={"format": "pt"})


def _rope_index_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    names = (
        "input_ids",
        "mm_token_type_ids",
        "image_grid_thw",
        "video_grid_thw",
        "second_per_grid_ts",
        "attention_mask",
    )
    return {name: batch[name] for name in names if name in batch}


def _run_in_worker(payload: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    """In a spawned process: unpickle the position-id function and its inputs, return its result."""
    func, inputs = pickle.loads(payload)
    return func(**inputs)


class VlmParitySuite(VisionMetadataChecks):
    """Generated vs upstream ``transformers`` for one VLM; subclasses set ``model``."""

    model: ClassVar[VlmModel]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "model" not in cls.__dict__:
            return
        backends = cls.model.backends

        @pytest.fixture(params=backends, ids=backends)
        def backend(self: VlmParitySuite, request: pytest.FixtureRequest) -> str:
            return request.param

        cls.backend = backend
        cases = [(slot, dtype) for slot in cls.model.guarded for dtype in (torch.float32, torch.bfloat16)]
        ids = [f"{slot}-{'fp32' if dtype == torch.float32 else 'bf16'}" for slot, dtype in cases]

        @pytest.fixture(params=cases, ids=ids)
        def slot_case(self: VlmParitySuite, request: pytest.FixtureRequest) -> tuple[str, torch.dtype]:
            return request.param

        cls.slot_case = slot_case

    @pytest.fixture(autouse=True)
    def _eager_slots(self) -> Iterator[None]:
        """Each test starts with every slot eager, on one torch thread, and leaks neither into the next."""
        with eager_slots_on_one_thread():
            yield

    def _pair(self, backend: str, dtype: torch.dtype = torch.float32, **overrides: Any) -> ModelPair:
        config = self.model.config(**overrides)
        name = self.model.causal_lm
        return build_pair(
            config,
            get_model_class(self.model.model_type, name, use_hf=True),
            get_model_class(self.model.model_type, name, backend),
            dtype=dtype,
        )

    def _parity(self, backend: str, batch: Mapping[str, Any], **options: Any) -> Any:
        return check_parity(self.model.config(), self.model.causal_lm, backend=backend, batch=batch, **options)

    # -- compiled, as a training user compiles each decoder layer ----------------------------------
    def test_first_text_decoder_layers_trace_as_upstreams_do_and_train_compiled_as_eagerly(self) -> None:
        """``layer_compile.check_first_layers_compile`` on the text decoder, recorded on the multimodal batch, on the
        model's first backend (the towers' blocks: tests/compile/test_towers.py)."""
        pair = self._pair(self.model.backends[0])
        # Without router logits: asked for, upstream's output capturing hooks the routers with a read of a
        # ContextVar, which breaks both sides' graphs alike (docs/compile.md); the check is of the generated code.
        batch = {k: v for k, v in self.model.multimodal_batch().items() if k != "output_router_logits"}
        check_first_layers_compile(pair.upstream, pair.generated, batch)

    # -- registration ---------------------------------------------------------------------------
    def test_registry_returns_the_generated_classes(self, backend: str) -> None:
        module = MODELING_REGISTRY.module_path(self.model.model_type, backend)
        for name in (self.model.causal_lm, self.model.base_model):
            assert MODELING_REGISTRY.get_class(self.model.model_type, name, backend).__module__ == module

    def test_registry_config_and_processor_classes_are_upstreams(self) -> None:
        assert MODEL_CONFIG_REGISTRY[self.model.model_type] is self.model.config_class
        assert MODEL_PROCESSOR_REGISTRY[self.model.model_type] is self.model.processor_class

    # -- the processor ----------------------------------------------------------------------------
    def test_processor_expands_an_image_and_a_two_frame_video_into_their_placeholders(self) -> None:
        batch = self.model.multimodal_batch()
        merge = self.model.vision_config["spatial_merge_size"]
        image_grids, video_grids = batch["image_grid_thw"], batch["video_grid_thw"]
        assert image_grids[:, 0].tolist() == [1, 1] and video_grids[:, 0].tolist() == [1, 1]  # 2 frames: one patch
        assert bool(((image_grids[:, 1:] % merge) == 0).all()) and bool(((video_grids[:, 1:] % merge) == 0).all())
        assert batch["pixel_values"].shape[0] == int(image_grids.prod(-1).sum())
        assert batch["pixel_values_videos"].shape[0] == int(video_grids.prod(-1).sum())
        tokens = batch["mm_token_type_ids"]
        assert int((tokens == 1).sum()) == int(image_grids.prod(-1).sum()) // merge**2
        assert int((tokens == 2).sum()) == int(video_grids.prod(-1).sum()) // merge**2
        assert bool((batch["input_ids"][tokens == 1] == self.model.token_id("<|image_pad|>")).all())

    # -- eager parity ---------------------------------------------------------------------------
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_image_and_video_batch_matches_upstream(self, backend: str, dtype: torch.dtype) -> None:
        self._parity(backend, self.model.multimodal_batch(), dtype=dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_text_only_batch_matches_upstream(self, backend: str, dtype: torch.dtype) -> None:
        self._parity(backend, self.model.text_only_batch(), dtype=dtype)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_batch_with_images_in_some_rows_matches_upstream(self, backend: str, dtype: torch.dtype) -> None:
        self._parity(backend, self.model.some_rows_with_images_batch(), dtype=dtype)

    # -- the slot guards ------------------------------------------------------------------------
    def test_reference_kernel_in_one_slot_matches_upstream(
        self, backend: str, slot_case: tuple[str, torch.dtype]
    ) -> None:
        """The slot's reference kernel, bound alone and called (the counter), recomputes upstream."""
        slot, dtype = slot_case
        _, candidate = self._parity(
            backend,
            self.model.multimodal_batch(),
            kernels={slot: reference_kernel(slot)},
            dtype=dtype,
            tolerance=tolerance_for(dtype, kernels=False),
            logits="close",
        )
        assert candidate.calls[slot] > 0

    @pytest.mark.parametrize("slot", ["rope", "rope_vision"])
    @pytest.mark.parametrize("dtype", DTYPES)
    def test_reference_rope_kernels_are_upstream_bit_for_bit(
        self, backend: str, slot: str, dtype: torch.dtype
    ) -> None:
        """The text RoPE (sectioned by the guard where upstream sections it) and the vision RoPE through their
        slots: logits, loss and every gradient exactly upstream's."""
        _, candidate = self._parity(
            backend,
            self.model.multimodal_batch(),
            kernels={slot: reference_kernel(slot)},
            dtype=dtype,
            tolerance=Tolerance(rtol=0.0, atol=0.0),
            logits="equal",
        )
        assert candidate.calls[slot] > 0

    def test_no_layer_norm_module_runs_itself_while_the_layer_norm_slot_is_bound(self, backend: str) -> None:
        """Every ``nn.LayerNorm`` a multimodal step reaches (vision blocks and mergers, audio layers and the audio
        tower's last norm) is called through the slot: none runs its own forward, and the counted reference
        kernel gets each one's weight. A DeepSeek sparse attention indexer's own norms are the exception the
        scaffold reports: its forward goes behind ``dsa_indexer`` whole, so they stay upstream's calls."""
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        indexers = [name for name, module in model.named_modules() if _consults(module, "dsa_indexer_slot")]
        norms = {
            name: module
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.LayerNorm) and not any(name.startswith(f"{owner}.") for owner in indexers)
        }
        ran_itself = set()
        for name, module in norms.items():
            module.register_forward_hook(lambda module, args, out, name=name: ran_itself.add(name))
        seen: set[int] = set()

        def counted(x: torch.Tensor, shape: Any, weight: torch.Tensor | None, *args: Any) -> torch.Tensor:
            seen.add(id(weight))
            return reference_kernel("layer_norm")(x, shape, weight, *args)

        with torch.no_grad(), bound_ops(OpsConfig()):
            SLOTS["layer_norm"].bind(counted, name="reference.layer_norm")
            model(**self.model.multimodal_batch(labels=False))
        assert ran_itself == set(), f"LayerNorm modules outside the slot: {sorted(ran_itself)}"
        assert {name for name, module in norms.items() if id(module.weight) in seen} == set(norms)

    def test_reference_kernels_in_every_slot_match_upstream(self, backend: str) -> None:
        _, candidate = self._parity(
            backend,
            self.model.multimodal_batch(),
            kernels=reference_kernels(self.model.guarded),
            tolerance=tolerance_for(torch.float32, kernels=False),
            logits="close",
        )
        assert set(candidate.calls) == set(self.model.guarded)

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_chunked_loss_and_gradients_match_upstream(self, backend: str, dtype: torch.dtype) -> None:
        self._parity(backend, self.model.multimodal_batch(), ops=CHUNKED_LOSS, dtype=dtype)

    def test_chunked_loss_sees_only_the_positions_logits_to_keep_keeps(self, backend: str) -> None:
        batch = self.model.multimodal_batch()
        batch["labels"] = batch["labels"][:, -5:].contiguous()
        batch["logits_to_keep"] = 5
        self._parity(backend, batch, ops=CHUNKED_LOSS)

    def test_bound_loss_kernel_takes_the_shift_labels_the_forward_is_given(self, backend: str) -> None:
        """A caller's ``shift_labels`` (what ``shard_sequence`` gives each sp rank) reach the bound loss kernel:
        the loss is upstream's on labels whose shifted targets they are, not on the ``labels`` also given."""
        pair = self._pair(backend)
        batch = self.model.multimodal_batch()
        kept = batch["labels"].clone()
        kept[:, : kept.shape[1] // 2] = IGNORE_INDEX
        with torch.no_grad():
            expected = pair.upstream(**{**batch, "labels": kept}).loss
            with bound_ops(CHUNKED_LOSS):
                actual = pair.generated(**batch, shift_labels=shift_causal_labels(kept, IGNORE_INDEX)).loss
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("logits_to_keep", [1, 4, torch.tensor([0, 5, 10])], ids=["last-1", "last-4", "index"])
    def test_logits_to_keep_selects_the_same_positions_as_upstream(
        self, backend: str, logits_to_keep: int | torch.Tensor
    ) -> None:
        pair = self._pair(backend)
        batch = self.model.multimodal_batch(labels=False)
        with torch.no_grad():
            expected = pair.upstream(**batch, logits_to_keep=logits_to_keep).logits
            actual = pair.generated(**batch, logits_to_keep=logits_to_keep).logits
        kept = logits_to_keep if isinstance(logits_to_keep, int) else len(logits_to_keep)
        assert actual.shape[1] == kept and actual.shape[-1] == self.model.config().text_config.vocab_size
        assert torch.equal(actual, expected)

    def test_sdpa_attention_text_and_vision_matches_upstream_sdpa(self, backend: str) -> None:
        """Both towers' attention goes through the registered implementation the config names, as upstream.

        Where upstream's model declares no SDPA support (DeepSeek's latent attention in HY-V4-VL), asking for
        it is refused by the generated class as by upstream's."""
        name = self.model.causal_lm
        if not get_model_class(self.model.model_type, name, use_hf=True)._supports_sdpa:
            for cls in (
                get_model_class(self.model.model_type, name, use_hf=True),
                get_model_class(self.model.model_type, name, backend),
            ):
                with pytest.raises(ValueError, match="scaled_dot_product_attention"):
                    cls(self.model.config(attn_implementation="sdpa"))
            return
        pair = self._pair(backend, attn_implementation="sdpa")
        assert pair.generated.config.vision_config._attn_implementation == "sdpa"
        batch = self.model.multimodal_batch(labels=False)
        with torch.no_grad():
            assert torch.equal(pair.generated(**batch).logits, pair.upstream(**batch).logits)

    # -- checkpoints ----------------------------------------------------------------------------
    def _noisy(self, model: PreTrainedModel) -> PreTrainedModel:
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for tensor in model.state_dict().values():
                if tensor.is_floating_point():
                    tensor.add_(0.02 * torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype))
        return model.eval()

    def _logits(self, model: PreTrainedModel) -> torch.Tensor:
        with torch.no_grad():
            return model(**self.model.multimodal_batch(labels=False)).logits

    def test_upstream_save_pretrained_loads_in_the_generated_from_pretrained(
        self, backend: str, tmp_path: Path
    ) -> None:
        seed_everything(0)
        upstream_cls = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)
        source = self._noisy(upstream_cls(self.model.config()))
        source.save_pretrained(tmp_path)
        generated_cls = get_model_class(self.model.model_type, self.model.causal_lm, backend)
        generated = generated_cls.from_pretrained(tmp_path, **self.model.load_options())
        assert type(generated) is generated_cls
        upstream = loaded_alike(source, tmp_path, **self.model.load_options())
        assert torch.equal(self._logits(generated), self._logits(upstream))

    def test_generated_save_pretrained_loads_in_upstream_from_pretrained(self, backend: str, tmp_path: Path) -> None:
        seed_everything(0)
        generated_cls = get_model_class(self.model.model_type, self.model.causal_lm, backend)
        source = self._noisy(generated_cls(self.model.config()))
        source.save_pretrained(tmp_path)
        upstream_cls = get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)
        upstream, info = upstream_cls.from_pretrained(tmp_path, output_loading_info=True, **self.model.load_options())
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        generated = loaded_alike(source, tmp_path, **self.model.load_options())
        assert torch.equal(self._logits(upstream), self._logits(generated))

    def _saved_by_upstream(self, folder: Path) -> PreTrainedModel:
        seed_everything(0)
        upstream = self._noisy(
            get_model_class(self.model.model_type, self.model.causal_lm, use_hf=True)(self.model.config())
        )
        upstream.save_pretrained(folder)
        return upstream

    def test_generated_save_pretrained_writes_the_keys_upstream_writes(self, backend: str, tmp_path: Path) -> None:
        self._saved_by_upstream(tmp_path / "upstream")
        seed_everything(0)
        get_model_class(self.model.model_type, self.model.causal_lm, backend)(self.model.config()).save_pretrained(
            tmp_path / "generated"
        )
        assert _saved_keys(tmp_path / "generated") == _saved_keys(tmp_path / "upstream")

    def test_generated_from_pretrained_raises_on_a_missing_or_an_unexpected_weight(
        self, backend: str, tmp_path: Path
    ) -> None:
        self._saved_by_upstream(tmp_path)
        dropped = min(key for key in _saved_keys(tmp_path) if key.endswith("norm.weight"))
        _rewrite_checkpoint(tmp_path, drop=dropped, add=PROBE_KEY)
        generated_cls = get_model_class(self.model.model_type, self.model.causal_lm, backend)
        # Upstream saves the hub layout (``model.layers...``); the errors name the model's keys
        # (``model.language_model.layers...``), so the test looks for the part both share.
        missing, unexpected = dropped.split(".", 1)[1], PROBE_KEY.split(".", 1)[1]
        with pytest.raises(CheckpointError, match="missing from the checkpoint") as raised:
            generated_cls.from_pretrained(tmp_path, attn_implementation="eager")
        assert missing in str(raised.value) and unexpected in str(raised.value)
        model, info = generated_cls.from_pretrained(
            tmp_path, strict=False, output_loading_info=True, attn_implementation="eager"
        )
        assert type(model) is generated_cls
        assert [key for key in info["missing_keys"] if key.endswith(missing)]
        assert [key for key in info["unexpected_keys"] if key.endswith(unexpected)]

    def test_every_generated_class_takes_upstreams_checkpoint_conversions(self, backend: str) -> None:
        """``is_custom_code`` false for each, which makes transformers apply the model_type's conversions: the
        module's own, and the sub-models a built model takes from other generated modules (glm46v's glm4v towers)."""
        module = MODELING_REGISTRY.get_module(self.model.model_type, backend)
        classes = {
            value
            for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, PreTrainedModel) and value.__module__ == module.__name__
        }
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        classes |= {type(sub) for sub in model.modules() if isinstance(sub, PreTrainedModel)}
        assert len(classes) >= 4  # base, vision, text, model, head
        assert [cls.__name__ for cls in classes if cls.is_custom_code()] == []

    # -- dummy_forward ----------------------------------------------------------------------------
    def _text_only_step(self, backend: str, *, dummy: bool, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
        seed_everything(0)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend).to(dtype).train()
        loss = model(**self.model.text_only_batch()).loss
        if dummy:
            loss = loss + self._dummy_owner(model).dummy_forward()
        loss.backward()
        return loss.detach(), {name: param.grad for name, param in model.named_parameters()}

    def _dummy_owner(self, model: PreTrainedModel) -> torch.nn.Module:
        """What a rank without images runs: the Model's ``dummy_forward`` where it has one (its merger sits next to
        the tower, PaddleOCR-VL's), else the tower's."""
        base = _attribute(model, self.model.vision_attr.rpartition(".")[0]) if "." in self.model.vision_attr else model
        return base if hasattr(type(base), "dummy_forward") else _attribute(model, self.model.vision_attr)

    def _other_towers(self) -> tuple[str, ...]:
        """Towers besides the vision one that a multimodal batch feeds, each with a dummy of its own (none here)."""
        return ()

    def test_dummy_forward_reaches_every_parameter_an_image_step_reaches(self, backend: str) -> None:
        """A text-only step plus the dummy gives a gradient to every parameter an image step gives one, the
        tower's and a merger next to it alike, so FSDP and DDP see the same parameters on every rank."""
        seed_everything(0)
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend).train()
        model(**self.model.multimodal_batch()).loss.backward()
        other = tuple(f"{attr}." for attr in self._other_towers())  # their own dummies cover them (Omni's audio)
        reached = {
            name for name, param in model.named_parameters() if param.grad is not None and not name.startswith(other)
        }
        _, grads = self._text_only_step(backend, dummy=True)
        assert sorted(name for name in reached if grads[name] is None) == []

    def test_dummy_forward_adds_exactly_zero_to_the_loss_and_its_gradients(self, backend: str) -> None:
        plain_loss, plain_grads = self._text_only_step(backend, dummy=False)
        loss, grads = self._text_only_step(backend, dummy=True)
        assert torch.equal(loss, plain_loss)
        for name, grad in plain_grads.items():
            if grad is not None:
                assert torch.equal(grads[name], grad), name

    @pytest.mark.parametrize("dtype", DTYPES)
    def test_dummy_forward_gives_every_vision_parameter_a_gradient(self, backend: str, dtype: torch.dtype) -> None:
        _, plain_grads = self._text_only_step(backend, dummy=False, dtype=dtype)
        _, grads = self._text_only_step(backend, dummy=True, dtype=dtype)
        prefix = self.model.vision_attr + "."
        vision = [name for name in grads if name.startswith(prefix)]
        assert vision and all(plain_grads[name] is None for name in vision)  # without it, none would have one
        assert [name for name in vision if grads[name] is None] == []

    # -- position ids ---------------------------------------------------------------------------
    def _upstream_rope_index(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        config = self.model.config()
        upstream = get_model_class(self.model.model_type, self.model.base_model, use_hf=True)(config)
        return upstream.get_rope_index(**_rope_index_inputs(batch))

    def _position_id_func(self, backend: str) -> Any:
        return build_model(
            self.model.config(), architecture=self.model.causal_lm, backend=backend
        ).get_position_id_func()

    @pytest.mark.parametrize("sample", ["text-only", "image", "video", "mixed"])
    def test_position_id_func_equals_upstream_get_rope_index(self, backend: str, sample: str) -> None:
        rows = self.model.multimodal_batch(labels=False)
        batch = self._sample(rows, self._rows[sample])
        expected = self._upstream_rope_index(batch)
        actual = self._position_id_func(backend)(**_rope_index_inputs(batch))
        assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))

    def test_position_id_func_of_a_batch_equals_upstream_get_rope_index(self, backend: str) -> None:
        batch = self.model.multimodal_batch(labels=False)
        expected = self._upstream_rope_index(batch)
        actual = self._position_id_func(backend)(**_rope_index_inputs(batch))
        assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))

    def test_position_id_func_takes_an_attention_mask_by_attention_type(self, backend: str) -> None:
        """transformers 5 may pass the mask as a dict by attention type; the function reads its full attention."""
        batch = self.model.multimodal_batch(labels=False)
        expected = self._upstream_rope_index(batch)
        inputs = {**_rope_index_inputs(batch), "attention_mask": {"full_attention": batch["attention_mask"]}}
        actual = self._position_id_func(backend)(**inputs)
        assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))

    def test_position_id_func_pickles_and_runs_in_a_spawned_worker(self, backend: str) -> None:
        batch = self.model.multimodal_batch(labels=False)
        payload = pickle.dumps((self._position_id_func(backend), _rope_index_inputs(batch)))
        actual = run_in_spawned_worker(_run_in_worker, payload)
        expected = self._upstream_rope_index(batch)
        assert all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))

    def test_position_id_func_of_the_base_model_is_the_same_function(self, backend: str) -> None:
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        ours, base = model.get_position_id_func(), model.model.get_position_id_func()
        assert (ours.func, ours.args) == (base.func, base.args)

    #: The rows of :meth:`VlmModel.multimodal_batch` by the kind of sample each holds.
    _rows: ClassVar[Mapping[str, int]] = MappingProxyType({"text-only": 2, "image": 0, "video": 1, "mixed": 3})
    #: The kinds of document the packed-row position-id check packs.
    packed_kinds: ClassVar[tuple[str, ...]] = ("text-only", "image", "video", "mixed")
    #: The two documents the packed row through the model holds.
    packed_pair: ClassVar[tuple[str, str]] = ("text-only", "image")
    #: The inputs a packed row concatenates over its documents (the towers' inputs and their grids).
    packed_inputs: ClassVar[tuple[str, ...]] = (*_PIXELS, "image_grid_thw", "video_grid_thw", "second_per_grid_ts")

    def _rope_index_arguments(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The position-id function's (and get_rope_index's) arguments for a processor batch."""
        return _rope_index_inputs(batch)

    def _documents(self, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
        """One sample of each of ``kinds``, from the multimodal batch, trimmed to its real tokens, with its own
        pixels and grids."""
        rows = self.model.multimodal_batch(labels=False)
        documents = []
        for kind in kinds:
            row = self._rows[kind]
            sample = self._sample(rows, row)
            real = int(sample["attention_mask"].sum())
            for name in ("input_ids", "mm_token_type_ids", "attention_mask"):
                sample[name] = sample[name][:, :real]
            documents.append({**sample, **self._pixels(rows, row)})
        return documents

    def _packed(self, backend: str, documents: list[dict[str, Any]]) -> dict[str, Any]:
        """One row packing ``documents``: tokens and the towers' inputs concatenated, no attention mask, position
        ids ``[4, 1, total]`` (``packed_position_ids`` of the position-id function's, run per document)."""
        func = self._position_id_func(backend)
        rope = [func(**self._rope_index_arguments(doc))[0] for doc in documents]
        packed: dict[str, Any] = {"position_ids": packed_position_ids(rope)}
        packed["input_ids"] = torch.cat([doc["input_ids"] for doc in documents], dim=1)
        for name in self.packed_inputs:
            parts = [doc[name] for doc in documents if name in doc]
            if parts:
                packed[name] = torch.cat(parts)
        return packed

    def test_position_ids_of_packed_documents_equal_upstream_get_rope_index_per_document(self, backend: str) -> None:
        documents = self._documents(self.packed_kinds)
        packed = self._packed(backend, documents)
        expected = torch.cat([self._upstream_rope_index(doc)[0] for doc in documents], dim=-1)
        assert torch.equal(packed["position_ids"][1:], expected)

    def _packed_kwargs(self, documents: list[dict[str, Any]]) -> dict[str, Any]:
        """What a packed row also hands the model: the documents' boundaries where a Gated DeltaNet layer reads
        them (``cu_seq_lens_q``; attention layers read the text positions)."""
        lengths = [doc["input_ids"].shape[1] for doc in documents]
        return packed_document_kwargs(self.model.config().get_text_config(), lengths)

    def _packed_ops(self) -> OpsConfig:
        return packed_document_ops(self.model.config().get_text_config())

    def test_packed_documents_give_each_document_its_logits_alone(self, backend: str) -> None:
        """Two documents, one with an image, in one row (``[4, 1, L]`` position ids, no attention mask, the
        config's default cache) keep apart: each one's logits are upstream's for it alone."""
        pair = self._pair(backend)
        documents = self._documents(self.packed_pair)
        packed = self._packed(backend, documents)
        with torch.no_grad():
            alone = torch.cat([pair.upstream(**doc).logits for doc in documents], dim=1)
            with bound_ops(self._packed_ops()):
                logits = pair.generated(**packed, **self._packed_kwargs(documents)).logits
        torch.testing.assert_close(logits, alone, rtol=1e-4, atol=1e-5)

    def test_four_row_position_ids_of_one_document_give_upstreams_logits(self, backend: str) -> None:
        """Nothing packed, nothing changed: the layout's text row counting on through one document is upstream's."""
        pair = self._pair(backend)
        packed = self._packed(backend, self._documents(self.packed_pair[-1:]))
        with torch.no_grad():
            assert torch.equal(pair.generated(**packed).logits, pair.upstream(**packed).logits)

    def _pixels(self, batch: Mapping[str, Any], row: int) -> dict[str, Any]:
        """The patches of row ``row``'s own images and videos (``pixel_values``, ``pixel_values_videos``)."""
        pixels = {}
        for kind, grids, name in ((1, "image_grid_thw", _PIXELS[0]), (2, "video_grid_thw", _PIXELS[1])):
            if batch.get(grids) is None:
                continue
            counts = self._items_per_row(batch["mm_token_type_ids"], kind, batch[grids])
            patches = batch[grids].prod(-1).tolist()
            first = sum(counts[:row])
            start = sum(patches[:first])
            if counts[row]:
                pixels[name] = batch[name][start : start + sum(patches[first : first + counts[row]])]
        return pixels

    def _sample(self, batch: Mapping[str, Any], row: int) -> dict[str, Any]:
        """Row ``row`` of the multimodal batch alone, with the grids of its own images and videos."""
        tokens = batch["mm_token_type_ids"]
        sample = {name: batch[name][row : row + 1] for name in ("input_ids", "mm_token_type_ids", "attention_mask")}
        for kind, grids, seconds in ((1, "image_grid_thw", None), (2, "video_grid_thw", "second_per_grid_ts")):
            counts = self._items_per_row(tokens, kind, batch.get(grids))
            if counts[row]:
                start = sum(counts[:row])
                sample[grids] = batch[grids][start : start + counts[row]]
                if seconds and seconds in batch:
                    sample[seconds] = batch[seconds][start : start + counts[row]]
        return sample

    def _items_per_row(self, tokens: torch.Tensor, kind: int, grids: torch.Tensor | None) -> list[int]:
        """How many images (kind 1) or videos (kind 2) each row holds: its placeholder runs."""
        runs = []
        for row in tokens:
            marked = (row == kind).int()
            runs.append(int(((marked[1:] - marked[:-1]) == 1).sum() + marked[0]))
        assert grids is None or sum(runs) == len(grids)
        return runs

    # -- the module tree ------------------------------------------------------------------------
    def _kept_upstream(self) -> set[str]:
        return set(importlib.import_module(self.model.patch_config).KEPT_UPSTREAM_MODULES)

    def test_every_module_is_generated_or_deliberately_left_upstream(self, backend: str) -> None:
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        outside = module_classes_outside(model, MODELING_REGISTRY.module_path(self.model.model_type, backend))
        assert outside - self._kept_upstream() == set()

    def test_every_module_left_upstream_is_in_the_model(self, backend: str) -> None:
        """The config's list names no class the model lacks, so it cannot hide a future change."""
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend)
        outside = module_classes_outside(model, MODELING_REGISTRY.module_path(self.model.model_type, backend))
        assert self._kept_upstream() - outside == set()


def _consults(module: torch.nn.Module, slot: str) -> bool:
    """The generated forward of ``module``'s class calls ``slot`` (its source names it)."""
    try:
        return slot in inspect.getsource(type(module).forward)
    except (OSError, TypeError):
        return False
