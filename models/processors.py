"""A VLM's or Omni model's own processor on a CPU machine where torchvision does not load.

Upstream's processors take a video processor, and upstream's video processors need torchvision (the package
index serves a CUDA build of it that does not load with a CPU torch). Nothing else of a Qwen-VL-style
processor needs it: the slow image processors are numpy and PIL. So the processor is built from its parts:

* :class:`FramesVideoProcessor` sends each frame through the image processor and stacks the frames of one
  temporal patch, the layout upstream's Qwen-VL video processors write. Frames are sized by the image
  processor's settings (its ``min_pixels`` / ``max_pixels``), not by a video configuration of their own;
* :class:`ImagesOnlyVideoProcessor` stands in for the video processor where the image processor has no
  temporal patches (LLaVA-OneVision's, InternVL's): images and text go through, a video is refused by name;
* :func:`build_processor` builds the model's processor class from its parts. ``ProcessorMixin`` checks a
  video processor against ``transformers.BaseVideoProcessor``, which without torchvision is a placeholder
  class that nothing is an instance of; for this one construction, that argument is checked against the real
  base class instead. Every other argument is checked as upstream checks it;
* :func:`load_processor` does it for a folder that holds a checkpoint's processor files (a hub download, or
  what ``save_pretrained`` wrote): its tokenizer, the numpy/PIL class of its image processor (transformers'
  ``AutoImageProcessor`` itself requires torchvision), else, for a model whose image processor exists only for
  torchvision, that class on modelgraft's torch stand-in for torchvision's image functions, its feature
  extractor (Omni), its chat template, and the processor's own options (``patch_size``, ``image_seq_length``:
  what sizes its placeholders).

Importing this module imports transformers' processing modules, not torchvision.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import numpy as np
import transformers
from transformers import AutoTokenizer, BatchFeature, ProcessorMixin
from transformers.video_processing_utils import BaseVideoProcessor
from transformers.video_utils import VideoMetadata, make_batched_videos

from modelgraft.models.processor_imports import importable_processor_class
from modelgraft.models.registry import MODEL_PROCESSOR_REGISTRY

__all__ = ["FramesVideoProcessor", "ImagesOnlyVideoProcessor", "build_processor", "load_processor"]


class FramesVideoProcessor(BaseVideoProcessor):
    """Videos through an image processor: each frame processed as an image, ``temporal_patch_size`` frames per patch.

    The image processor patchifies one frame into rows ``[C, temporal_patch_size, P, P]`` with the frame repeated
    along the temporal axis; a video's row holds ``temporal_patch_size`` consecutive frames there instead, which
    is what upstream's Qwen2-VL video processor writes (same patch order: merge blocks, then channels, time, pixels).
    ``fps`` is the sampling rate the metadata reports (the processor derives ``second_per_grid_ts`` from it).
    """

    def __init__(self, image_processor: Any, fps: float = 1.0) -> None:
        super().__init__()
        self.image_processor = image_processor
        self.patch_size = image_processor.patch_size
        self.merge_size = image_processor.merge_size
        self.temporal_patch_size = image_processor.temporal_patch_size
        self.fps = fps

    def to_dict(self) -> dict[str, Any]:
        """What ``save_pretrained`` writes: the frame sizes and rate; the image processor is saved as itself."""
        return {
            "video_processor_type": type(self).__name__,
            "patch_size": self.patch_size,
            "merge_size": self.merge_size,
            "temporal_patch_size": self.temporal_patch_size,
            "fps": self.fps,
        }

    def __call__(self, videos: Any, **kwargs: Any) -> BatchFeature:
        step = self.temporal_patch_size
        rows, grids, metadata = [], [], []
        for frames in make_batched_videos(videos):
            frames = list(frames)
            if len(frames) % step:
                raise ValueError(f"a video needs a multiple of {step} frames, got {len(frames)}")
            images = self.image_processor(images=frames, return_tensors="np")
            _, grid_h, grid_w = (int(n) for n in images["image_grid_thw"][0])
            patches = images["pixel_values"].reshape(
                len(frames), grid_h * grid_w, -1, step, self.patch_size, self.patch_size
            )
            single = patches[:, :, :, 0]  # [frames, patches, C, P, P]: each frame once
            groups = [np.stack(list(single[t : t + step]), axis=2) for t in range(0, len(frames), step)]
            rows.append(np.concatenate([group.reshape(grid_h * grid_w, -1) for group in groups]))
            grids.append([len(frames) // step, grid_h, grid_w])
            metadata.append(
                VideoMetadata(total_num_frames=len(frames), fps=self.fps, frames_indices=list(range(len(frames))))
            )
        return BatchFeature(
            {
                "pixel_values_videos": np.concatenate(rows),
                "video_grid_thw": np.array(grids),
                "video_metadata": metadata,
            }
        )


class ImagesOnlyVideoProcessor(BaseVideoProcessor):
    """The video processor of a processor whose image processor cannot take frames (no temporal patches): calling
    it raises, naming why, instead of giving upstream's video processor, which needs torchvision.

    Some processors read their video processor's settings when they are built (MiniCPM-V's ``slice_mode`` and
    ``downsample_mode``, to size video placeholders). Those reads get the image processor's setting of that name,
    which upstream's video processors of these models share; a setting the image processor lacks stays missing.
    """

    def __init__(self, image_processor: Any = None) -> None:
        super().__init__()
        self.__dict__["_image_processor"] = image_processor

    def __getattr__(self, name: str) -> Any:
        image_processor = self.__dict__.get("_image_processor")
        if name.startswith("_") or image_processor is None:
            raise AttributeError(name)
        try:
            return getattr(image_processor, name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__} has no setting {name!r}") from None

    def to_dict(self) -> dict[str, Any]:
        """What ``save_pretrained`` writes: the settings of a video processor, not the image processor's."""
        return {key: value for key, value in super().to_dict().items() if key != "_image_processor"}

    def __call__(self, videos: Any, **kwargs: Any) -> BatchFeature:
        raise ValueError(
            "this processor was built without torchvision, and its image processor has no temporal patches to "
            "take video frames through (modelgraft.models.processors): pass images and text only"
        )


def _video_processor(image_processor: Any) -> BaseVideoProcessor:
    """Frames through the image processor where it patchifies them in time (Qwen-VL's), else images only."""
    if all(hasattr(image_processor, name) for name in ("patch_size", "merge_size", "temporal_patch_size")):
        return FramesVideoProcessor(image_processor)
    return ImagesOnlyVideoProcessor(image_processor)


def build_processor(processor_class: type[ProcessorMixin], **parts: Any) -> ProcessorMixin:
    """``processor_class(**parts)``, with a video processor over ``parts["image_processor"]`` when the class
    takes one and ``parts`` gives none: a :class:`FramesVideoProcessor` where the image processor has temporal
    patches, else an :class:`ImagesOnlyVideoProcessor`. ``parts`` may hold the processor's options too
    (``patch_size``, ``image_seq_length``)."""
    if "video_processor" in processor_class.get_attributes() and "video_processor" not in parts:
        parts = {**parts, "video_processor": _video_processor(parts["image_processor"])}
    processor = processor_class.__new__(processor_class)
    check = processor.check_argument_for_proper_class

    def check_video_processor_by_its_real_base(name: str, argument: Any) -> Any:
        if name == "video_processor":
            if not isinstance(argument, BaseVideoProcessor):
                raise TypeError(f"video_processor must be a BaseVideoProcessor, got {type(argument).__name__}")
            return BaseVideoProcessor
        return check(name, argument)

    processor.check_argument_for_proper_class = check_video_processor_by_its_real_base
    try:
        processor_class.__init__(processor, **parts)
    finally:
        del processor.check_argument_for_proper_class
    return processor


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _part_config(folder: Path, part: str, file: str) -> dict[str, Any]:
    """The saved settings of one part: nested in ``processor_config.json`` (what ``save_pretrained`` writes),
    else in the part's own file (hub checkpoints: ``preprocessor_config.json``)."""
    return _json(folder / "processor_config.json").get(part) or _json(folder / file)


def _processor_options(folder: Path, cls: type[ProcessorMixin]) -> dict[str, Any]:
    """The processor's own options ``processor_config.json`` holds (``patch_size``, ``image_seq_length``,
    ``num_additional_image_tokens``...): the top-level entries that name a parameter of the class, not a part.

    Left out, the processor would count a different number of placeholders per image than the model's
    features, which the model refuses at best and at worst (a count that happens to match) trains on."""
    settings = _json(folder / "processor_config.json")
    parameters = inspect.signature(cls.__init__).parameters
    parts = set(cls.get_attributes())
    return {
        name: value
        for name, value in settings.items()
        if name in parameters and name not in parts and name not in ("self", "chat_template")
    }


def _processor_class(folder: Path) -> type[ProcessorMixin]:
    """The class the folder's processor files name, else the one registered for its config's model type."""
    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        named = _json(folder / name).get("processor_class")
        if named:
            return importable_processor_class(f"transformers.{named}")
    model_type = _json(folder / "config.json").get("model_type")
    if model_type in MODEL_PROCESSOR_REGISTRY:
        return MODEL_PROCESSOR_REGISTRY[model_type]
    raise ValueError(
        f"{folder}: no processor_class in its processor files and no config.json of a registered model type; "
        "pass processor_class="
    )


def _from_settings(settings: dict[str, Any], key: str, folder: Path) -> Any:
    """The part the settings name under ``key``, built from them: the numpy/PIL class of an image processor
    (``<Name>Pil``, else ``<Name>`` without ``Fast``); where the model has none (cohere2_vision), its torchvision
    class on modelgraft's torch stand-in (``modelgraft.models.image_processor_imports``)."""
    name = settings.get(key)
    if not name:
        raise ValueError(f"{folder}: the processor files name no {key}")
    base = name.removesuffix("Fast")
    cls = getattr(transformers, f"{base}Pil", None) or getattr(transformers, base, None)
    if cls is None:
        raise ValueError(f"{folder}: the processor files name {key}={name!r}, which transformers does not define")
    cls = importable_processor_class(cls)  # a placeholder for want of torchvision: the stand-in-backed class
    return cls.from_dict({k: v for k, v in settings.items() if k != key})


def load_processor(folder: str | Path, *, processor_class: type[ProcessorMixin] | None = None) -> ProcessorMixin:
    """The model's processor from the checkpoint files in ``folder``, built without torchvision.

    ``processor_class`` defaults to the class the files name (``processor_class`` in their JSON), else the one
    registered for the model type of the folder's ``config.json``. The image processor is the numpy/PIL class
    of the one the files name (the torchvision class on the torch stand-in where there is none); videos go
    through it (:class:`FramesVideoProcessor`); the tokenizer and an
    Omni model's feature extractor load as upstream loads them. The chat template the folder holds is kept.
    """
    folder = Path(folder)
    cls = processor_class or _processor_class(folder)
    attributes = cls.get_attributes()
    image_settings = _part_config(folder, "image_processor", "preprocessor_config.json")
    parts: dict[str, Any] = {"image_processor": _from_settings(image_settings, "image_processor_type", folder)}
    if "tokenizer" in attributes:
        parts["tokenizer"] = AutoTokenizer.from_pretrained(folder)
    if "feature_extractor" in attributes:
        audio_settings = _part_config(folder, "feature_extractor", "preprocessor_config.json")
        parts["feature_extractor"] = _from_settings(audio_settings, "feature_extractor_type", folder)
    processor = build_processor(cls, **parts, **_processor_options(folder, cls))
    template = folder / "chat_template.jinja"
    if template.is_file():
        processor.chat_template = template.read_text(encoding="utf-8")
    elif getattr(parts.get("tokenizer"), "chat_template", None):
        processor.chat_template = parts["tokenizer"].chat_template
    return processor
