"""Upstream's torchvision image processors run without torchvision, on modelgraft's torch stand-in for its image
functions: equivalent to the PIL class where a model ships both, working for the models that ship no other, and
refused, before anything runs, where a module asks torchvision for more than the stand-in implements.

The refusals run on a package written under tmp_path in the shape of a transformers model folder.
"""

from __future__ import annotations

import pickle
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from PIL import Image
from transformers import BatchFeature
from transformers.image_utils import PILImageResampling
from transformers.utils import is_torchvision_available
from transformers.utils.import_utils import DummyObject

from modelgraft import models
from modelgraft.models import image_processor_imports
from modelgraft.models.image_processor_imports import importable_image_processor_class
from modelgraft.models.processor_imports import ProcessorImportError, importable_processor_class
from modelgraft.models.processors import build_processor, load_processor
from modelgraft.models.testing.preloaded_python import run_code
from modelgraft.models.testing.vlm_processor import synthetic_image, tiny_tokenizer

without_torchvision = pytest.mark.skipif(is_torchvision_available(), reason="torchvision is installed here")

REPO_ROOT = Path(models.__file__).resolve().parent.parent


def _photo(height: int, width: int, *, seed: int) -> Image.Image:
    """A textured RGB image: sums of waves of up to 40 cycles across, plus mild noise (sigma 4 of 255).

    transformers calls its backends equivalent on a photograph (COCO's cats). Uniform noise is no photograph: on
    it, PIL's bicubic (a = -0.5) and torch's (a = -0.75) part ways by design. A smooth gradient is too easy: a
    resize without antialias, or with the wrong filter, stays within the tolerance on it. On this image the
    correct stand-in stays within it and both of those mistakes leave it, for every model below."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    channels = []
    for _ in range(3):
        waves = np.zeros((height, width))
        for _ in range(6):
            fx, fy, phase = rng.uniform(0.5, 40.0), rng.uniform(0.5, 40.0), rng.uniform(0.0, 2 * np.pi)
            waves += np.sin(2 * np.pi * (fx * x + fy * y) + phase)
        channels.append(waves)
    pixels = np.stack(channels, axis=-1)
    pixels = (pixels - pixels.min()) / (pixels.max() - pixels.min()) * 255 + rng.normal(0, 4, (height, width, 3))
    return Image.fromarray(np.clip(pixels.round(), 0, 255).astype(np.uint8))


def _module(model: str) -> str:
    return f"transformers.models.{model}.image_processing_{model}"


# -- equivalence with the PIL class, where a model ships both ------------------------------------------------------

#: Models with both backends whose default resampling the stand-in implements (idefics3's is LANCZOS, which falls
#: back to BICUBIC here as in upstream's own code for torchvision older than 0.27: not the same filter as PIL's).
BOTH_BACKENDS = {
    "siglip": ("SiglipImageProcessor", "SiglipImageProcessorPil"),
    "clip": ("CLIPImageProcessor", "CLIPImageProcessorPil"),
    "llava_onevision": ("LlavaOnevisionImageProcessor", "LlavaOnevisionImageProcessorPil"),
    "llava_next": ("LlavaNextImageProcessor", "LlavaNextImageProcessorPil"),
    "gemma3": ("Gemma3ImageProcessor", "Gemma3ImageProcessorPil"),
    "qwen2_vl": ("Qwen2VLImageProcessor", "Qwen2VLImageProcessorPil"),
}


@pytest.mark.parametrize("model", sorted(BOTH_BACKENDS))
def test_the_torchvision_class_on_the_stand_in_matches_the_pil_class(model: str) -> None:
    """Same keys, same shapes, integer outputs equal and floating-point ones within the tolerance transformers' own
    tests hold its two backends to: ``ImageProcessingTestMixin._assert_tensors_equivalence`` in transformers'
    tests/test_image_processing_common.py, used by ``test_backends_equivalence``, is
    ``torch.testing.assert_close(atol=1e-1, rtol=1e-3)`` and a mean absolute difference of at most 5e-3."""
    torchvision_name, pil_name = BOTH_BACKENDS[model]
    on_stand_in = importable_image_processor_class(f"{_module(model)}.{torchvision_name}")()
    pil = getattr(transformers, pil_name)()
    image = _photo(480, 640, seed=0)

    ours, theirs = on_stand_in(images=[image], return_tensors="pt"), pil(images=[image], return_tensors="pt")

    assert ours.keys() == theirs.keys()
    for key in theirs:
        assert ours[key].shape == theirs[key].shape, key
        if theirs[key].is_floating_point():
            torch.testing.assert_close(ours[key], theirs[key], atol=1e-1, rtol=1e-3)
            assert (ours[key] - theirs[key]).abs().mean().item() <= 5e-3, key
        else:
            assert torch.equal(ours[key], theirs[key]), key


# -- the models that ship only the torchvision class ----------------------------------------------------------------

#: What each torchvision-only image processor of the pinned transformers returns for one image, by key.
TORCHVISION_ONLY = {
    "cohere2_vision": ("Cohere2VisionImageProcessor", {"pixel_values", "num_patches"}),
    "kimi_k25": ("Kimi_K25ImageProcessor", {"pixel_values", "image_grid_thw"}),
    "muse_glimmer": ("MuseGlimmerImageProcessor", {"pixel_values", "image_grid_thw"}),
    "llama4": ("Llama4ImageProcessor", {"pixel_values", "aspect_ratios"}),
    "lfm2_vl": ("Lfm2VlImageProcessor", {"pixel_values", "pixel_attention_mask", "spatial_shapes"}),
    "minimax_m3_vl": ("MiniMaxM3VLImageProcessor", {"pixel_values", "image_grid_thw"}),
    "molmo2": ("Molmo2ImageProcessor", {"pixel_values", "image_token_pooling", "image_grids", "image_num_crops"}),
    "step3p7": ("Step3p7ImageProcessor", {"pixel_values", "num_local_patches"}),
    "minicpm_ocr": ("MiniCPMOcrImageProcessor", {"pixel_values", "target_sizes", "grids", "num_patches_per_image"}),
}


@pytest.mark.upstream_facts
@pytest.mark.parametrize("model", sorted(TORCHVISION_ONLY))
def test_the_pinned_transformers_ships_these_image_processors_for_torchvision_only(model: str) -> None:
    folder = Path(transformers.__file__).parent / "models" / model

    assert (folder / f"image_processing_{model}.py").is_file()
    assert not list(folder.glob("image_processing_pil_*.py"))


@pytest.mark.upstream_facts
@pytest.mark.parametrize("model", sorted(TORCHVISION_ONLY))
def test_a_torchvision_only_image_processor_takes_a_pil_and_a_numpy_image(model: str) -> None:
    """Built with its defaults, it processes a PIL image and the same pixels as a numpy array into the same tensors."""
    name, keys = TORCHVISION_ONLY[model]
    processor = importable_image_processor_class(f"{_module(model)}.{name}")()
    image = _photo(60, 84, seed=1)

    from_pil = processor(images=[image], return_tensors="pt")
    from_numpy = processor(images=[np.array(image)], return_tensors="pt")

    assert set(from_pil.keys()) == set(from_numpy.keys()) == keys
    assert isinstance(from_pil["pixel_values"], torch.Tensor) and from_pil["pixel_values"].is_floating_point()
    for key in keys:
        assert torch.equal(torch.as_tensor(from_pil[key]), torch.as_tensor(from_numpy[key])), key


@without_torchvision
def test_the_placeholder_and_the_dotted_paths_give_one_class() -> None:
    by_path = importable_image_processor_class(f"{_module('cohere2_vision')}.Cohere2VisionImageProcessor")

    assert importable_image_processor_class(transformers.Cohere2VisionImageProcessor) is by_path
    assert importable_image_processor_class("transformers.Cohere2VisionImageProcessor") is by_path
    assert by_path.__module__ == _module("cohere2_vision")


def test_importable_processor_class_gives_the_image_processor_on_the_stand_in() -> None:
    expected = importable_image_processor_class(f"{_module('kimi_k25')}.Kimi_K25ImageProcessor")

    assert importable_processor_class("transformers.Kimi_K25ImageProcessor") is expected


@pytest.mark.parametrize(
    "path",
    [
        "transformers.models.cohere2_vision.processing_cohere2_vision.Cohere2VisionProcessor",
        "transformers.models.kimi_k25.processing_kimi_k25.Kimi_K25Processor",
        "transformers.models.muse_glimmer.processing_muse_glimmer.MuseGlimmerProcessor",
    ],
)
def test_the_processing_classes_of_torchvision_only_models_import(path: str) -> None:
    cls = importable_processor_class(path)

    assert issubclass(cls, transformers.ProcessorMixin) and cls.__name__ == path.rpartition(".")[2]


def test_a_pil_class_is_returned_as_it_is() -> None:
    cls = transformers.SiglipImageProcessorPil

    assert importable_image_processor_class(cls) is cls


def test_an_image_processor_on_the_stand_in_pickles() -> None:
    processor = importable_image_processor_class("transformers.Cohere2VisionImageProcessor")()

    assert type(pickle.loads(pickle.dumps(processor))) is type(processor)


def test_lanczos_falls_back_to_bicubic_as_upstream_s_resize_does_without_torchvision_0_27() -> None:
    """Upstream's ``TorchvisionBackend.resize`` resamples with BICUBIC (and warns) where torchvision is older than
    0.27, which is how it sees the stand-in: muse_glimmer's default LANCZOS gives BICUBIC's pixels."""
    cls = importable_image_processor_class("transformers.MuseGlimmerImageProcessor")
    image = _photo(60, 84, seed=2)

    lanczos = cls(resample=PILImageResampling.LANCZOS)(images=[image], return_tensors="pt")
    bicubic = cls(resample=PILImageResampling.BICUBIC)(images=[image], return_tensors="pt")

    assert torch.equal(lanczos["pixel_values"], bicubic["pixel_values"])


# -- what loading leaves in the process -----------------------------------------------------------------------------


def test_nothing_named_torchvision_enters_sys_modules() -> None:
    """In a fresh interpreter: what loading and running a torchvision-only class adds to ``sys.modules`` is its
    own module, its processing package's parents and the private copy of the backends, none named torchvision."""
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        before = set(sys.modules)
        from modelgraft.models.image_processor_imports import importable_image_processor_class
        cls = importable_image_processor_class("transformers.Cohere2VisionImageProcessor")
        cls()(images=[np.zeros((40, 60, 3), dtype=np.uint8)], return_tensors="pt")
        added = set(sys.modules) - before
        assert not [m for m in sys.modules if m.split(".")[0] == "torchvision"], sorted(sys.modules)
        assert not [m for m in added if "torchvision" in m], sorted(added)
        assert "transformers.models.cohere2_vision.image_processing_cohere2_vision" in added
        assert "modelgraft.models._tensor_image_backends" in added
        """
    )
    result = run_code(code, cwd=REPO_ROOT)

    assert result.returncode == 0, result.stderr


@without_torchvision
def test_transformers_own_backends_module_is_left_unbound() -> None:
    """The stand-in is bound in a private copy: transformers' ``image_processing_backends`` keeps no ``tvF``."""
    importable_image_processor_class("transformers.Cohere2VisionImageProcessor")
    backends = sys.modules["transformers.image_processing_backends"]

    assert not hasattr(backends, "tvF")
    assert backends.pil_torch_interpolation_mapping is None


@without_torchvision
def test_with_torchvision_installed_upstream_s_class_is_returned_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image_processor_imports, "is_torchvision_available", lambda: True)
    placeholder = transformers.Cohere2VisionImageProcessor

    assert importable_image_processor_class(placeholder) is placeholder
    assert isinstance(importable_image_processor_class("transformers.Cohere2VisionImageProcessor"), DummyObject)


# -- load_processor: a checkpoint whose image processor is torchvision-only -----------------------------------------

GLIMMER_TOKENS = ("<|patch|>", "<|image_start|>", "<|image_end|>", "<|video|>", "<|vid_frame_separator|>")
GLIMMER_TEXT = ["w1 <|image_start|><|patch|><|image_end|> w2"]


def _glimmer_outputs(processor: transformers.ProcessorMixin) -> BatchFeature:
    return processor(text=GLIMMER_TEXT, images=[synthetic_image(60, 80, seed=0)], return_tensors="pt")


def test_load_processor_takes_the_stand_in_class_where_there_is_no_pil_one(tmp_path: Path) -> None:
    processor_class = importable_processor_class(
        "transformers.models.muse_glimmer.processing_muse_glimmer.MuseGlimmerProcessor"
    )
    image_processor_class = importable_image_processor_class("transformers.MuseGlimmerImageProcessor")
    built = build_processor(
        processor_class,
        image_processor=image_processor_class(),
        tokenizer=tiny_tokenizer(special_tokens=GLIMMER_TOKENS),
    )
    built.save_pretrained(tmp_path)

    loaded = load_processor(tmp_path)

    assert type(loaded.image_processor) is image_processor_class
    expected, actual = _glimmer_outputs(built), _glimmer_outputs(loaded)
    assert actual.keys() == expected.keys() and all(torch.equal(actual[k], expected[k]) for k in expected)


# -- refusals, on a package shaped like a transformers model folder --------------------------------------------------

FAKE_MODULE = """
from torchvision.transforms.v2 import functional as tvF

from transformers.image_processing_backends import TorchvisionBackend


class FakeImageProcessor(TorchvisionBackend):
    def frame(self, image):
        return tvF.{call}
"""


@pytest.fixture
def fake_image_processor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Writes image_processing_fake.py with the given module source; returns its class's dotted path."""
    package = f"modelgraft_fake_images_{uuid.uuid4().hex[:8]}"
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        folder = tmp_path / package
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        (folder / "image_processing_fake.py").write_text(textwrap.dedent(source))
        return f"{package}.image_processing_fake.FakeImageProcessor"

    yield write
    for name in [name for name in sys.modules if name.split(".")[0] == package]:
        del sys.modules[name]


@without_torchvision
def test_a_module_that_calls_only_what_the_stand_in_implements_runs_on_it(fake_image_processor) -> None:
    cls = importable_image_processor_class(fake_image_processor(FAKE_MODULE.format(call="pad(image, [1, 0, 0, 0])")))

    assert cls().frame(torch.ones(3, 2, 2)).shape == (3, 2, 3)


@without_torchvision
def test_a_function_the_stand_in_lacks_is_refused_before_the_module_runs(fake_image_processor) -> None:
    path = fake_image_processor(FAKE_MODULE.format(call="rgb_to_grayscale(image)"))

    with pytest.raises(ProcessorImportError, match=r"image_processing_fake \(line 9\) .* calls tvF.rgb_to_grayscale"):
        importable_image_processor_class(path)
    assert path.rpartition(".")[0] not in sys.modules


@without_torchvision
def test_another_torchvision_import_is_refused_by_name(fake_image_processor) -> None:
    source = "from torchvision.ops import batched_nms\n" + FAKE_MODULE.format(call="pad(image, 1)")
    path = fake_image_processor(source)

    with pytest.raises(ProcessorImportError, match=r"\(line 1\) .* imports batched_nms from torchvision.ops"):
        importable_image_processor_class(path)
