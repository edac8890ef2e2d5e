"""A processor whose module imports torchvision only for helpers the PIL image processing module also defines
(Pixtral's, mistral3's processor) is importable without torchvision, gives upstream's outputs, and is refused
whenever the helper it would take is not the same code; the torchvision module stays unimportable afterwards.

The refusals run on a package written under tmp_path in the shape of a transformers model folder.
"""

from __future__ import annotations

import importlib
import math
import pickle
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import transformers
from transformers import Mistral3Config, PixtralImageProcessorPil, ProcessorMixin
from transformers.utils import is_torchvision_available
from transformers.utils.import_utils import DummyObject

from modelgraft.models import processor_imports
from modelgraft.models.processor_imports import ProcessorImportError, importable_processor_class
from modelgraft.models.processors import load_processor
from modelgraft.models.registry import MODEL_PROCESSOR_REGISTRY
from modelgraft.models.testing import registered_model
from modelgraft.models.testing.scaffold_composed import ScaffoldComposedVlm
from modelgraft.models.testing.vlm_processor import synthetic_image, tiny_tokenizer

without_torchvision = pytest.mark.skipif(is_torchvision_available(), reason="torchvision is installed here")

PIXTRAL_MODULE = "transformers.models.pixtral.processing_pixtral"
PIXTRAL_TORCHVISION_MODULE = "transformers.models.pixtral.image_processing_pixtral"
PATCH, MERGE, LONGEST_EDGE = 7, 2, 56
HEIGHT, WIDTH = 30, 50  # within LONGEST_EDGE: not resized, only padded up to whole merged patches


def _pixtral_processor() -> ProcessorMixin:
    cls = importable_processor_class("transformers.PixtralProcessor")
    image_processor = PixtralImageProcessorPil(
        size={"longest_edge": LONGEST_EDGE}, patch_size={"height": PATCH, "width": PATCH}
    )
    tokenizer = tiny_tokenizer(special_tokens=("[IMG]", "[IMG_BREAK]", "[IMG_END]"))
    return cls(image_processor=image_processor, tokenizer=tokenizer, patch_size=PATCH, spatial_merge_size=MERGE)


def _pixtral_outputs(processor: ProcessorMixin) -> dict:
    image = synthetic_image(HEIGHT, WIDTH, seed=0)
    return dict(processor(text=["w1 [IMG] w2"], images=[image], return_tensors="np"))


def test_pixtral_s_processor_expands_an_image_into_one_placeholder_per_merged_patch() -> None:
    processor = _pixtral_processor()
    rows, columns = math.ceil(HEIGHT / (PATCH * MERGE)), math.ceil(WIDTH / (PATCH * MERGE))

    outputs = _pixtral_outputs(processor)

    ids = outputs["input_ids"][0].tolist()
    assert ids.count(processor.image_token_id) == rows * columns == 12
    assert ids.count(processor.image_break_token_id) == rows - 1
    assert ids.count(processor.image_end_token_id) == 1
    assert outputs["image_sizes"].tolist() == [[rows * PATCH * MERGE, columns * PATCH * MERGE]]
    assert outputs["pixel_values"].shape == (1, 3, rows * PATCH * MERGE, columns * PATCH * MERGE)


def test_the_helper_taken_from_the_pil_module_counts_what_the_processor_expands() -> None:
    """``_get_num_multimodal_tokens`` is what calls ``get_resize_output_image_size``, the substituted name."""
    processor = _pixtral_processor()
    expanded = _pixtral_outputs(processor)["input_ids"][0].tolist().count(processor.image_token_id)

    counted = processor._get_num_multimodal_tokens(image_sizes=[[HEIGHT, WIDTH]])

    assert counted.num_image_tokens == [expanded]


def test_the_placeholder_the_dotted_name_and_the_module_path_give_one_class() -> None:
    by_name = importable_processor_class("transformers.PixtralProcessor")

    assert importable_processor_class(transformers.PixtralProcessor) is by_name
    assert importable_processor_class(f"{PIXTRAL_MODULE}.PixtralProcessor") is by_name
    assert issubclass(by_name, ProcessorMixin)


def test_a_built_pixtral_processor_pickles() -> None:
    processor = _pixtral_processor()

    assert type(pickle.loads(pickle.dumps(processor))) is type(processor)


@without_torchvision
def test_pixtral_s_torchvision_module_still_fails_to_import_afterwards() -> None:
    importable_processor_class("transformers.PixtralProcessor")

    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(PIXTRAL_TORCHVISION_MODULE)
    assert raised.value.name == "torchvision"
    assert PIXTRAL_TORCHVISION_MODULE not in sys.modules
    assert "image_processing_pixtral" not in vars(sys.modules["transformers.models.pixtral"])


@without_torchvision
def test_a_processor_that_imports_torchvision_itself_is_refused() -> None:
    with pytest.raises(ProcessorImportError, match=r"OmDetTurboProcessor .* imports torchvision itself"):
        importable_processor_class("transformers.OmDetTurboProcessor")


@without_torchvision
def test_with_torchvision_installed_upstream_s_class_is_returned_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processor_imports, "is_torchvision_available", lambda: True)

    placeholder = transformers.PixtralProcessor  # what transformers gives without torchvision: nothing substituted

    assert importable_processor_class(placeholder) is placeholder
    resolved = importable_processor_class("transformers.PixtralProcessor")
    assert isinstance(resolved, DummyObject) and resolved.__name__ == "PixtralProcessor"


# -- where classes are resolved by name --------------------------------------------------------------------------


def test_load_processor_loads_a_saved_pixtral_processor(tmp_path: Path) -> None:
    built = _pixtral_processor()
    built.save_pretrained(tmp_path)

    loaded = load_processor(tmp_path)

    assert type(loaded) is type(built)
    assert (loaded.patch_size, loaded.spatial_merge_size) == (PATCH, MERGE)
    assert _pixtral_outputs(loaded)["input_ids"].tolist() == _pixtral_outputs(built)["input_ids"].tolist()


def test_the_processor_registry_gives_the_importable_class() -> None:
    with registered_model(
        "mistral3",
        modeling={"gpu": "transformers.models.mistral3.modeling_mistral3"},
        config="transformers.Mistral3Config",
        processor="transformers.PixtralProcessor",
    ):
        assert MODEL_PROCESSOR_REGISTRY["mistral3"] is importable_processor_class("transformers.PixtralProcessor")


def test_a_composed_scaffold_given_the_placeholder_builds_with_the_importable_class() -> None:
    scaffold = ScaffoldComposedVlm(
        model_type="mistral3",
        config_class=Mistral3Config,
        processor_class=transformers.PixtralProcessor,
        image_processor_class=PixtralImageProcessorPil,
        causal_lm="Mistral3ForConditionalGeneration",
        guarded=(),
    )

    assert scaffold.processor_class is importable_processor_class("transformers.PixtralProcessor")


# -- refusals, on a package shaped like a transformers model folder --------------------------------------------------

TORCHVISION_MODULE = '''
import math

import torchvision


def _ceil_div(a, b):
    return -(-a // b)


def grid(height, width, patch):
    """Patches per side."""
    return _ceil_div(height, patch), _ceil_div(width, patch)
'''
PROCESSING_MODULE = """
from .image_processing_fake import grid


class FakeProcessor:
    def count(self, height, width, patch):
        rows, columns = grid(height, width, patch)
        return rows * columns
"""


@pytest.fixture
def fake_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """Writes a model folder whose PIL module is the given source; returns the processor's dotted path."""
    package = f"modelgraft_fake_model_{uuid.uuid4().hex[:8]}"
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(pil_source: str, *, processing: str = PROCESSING_MODULE, **more_modules: str) -> str:
        folder = tmp_path / package
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        (folder / "image_processing_fake.py").write_text(TORCHVISION_MODULE)
        (folder / "image_processing_pil_fake.py").write_text(textwrap.dedent(pil_source))
        (folder / "processing_fake.py").write_text(processing)
        for name, source in more_modules.items():
            (folder / f"{name}.py").write_text(source)
        return f"{package}.processing_fake.FakeProcessor"

    yield write
    for name in [name for name in sys.modules if name.split(".")[0] == package]:
        del sys.modules[name]


@without_torchvision
def test_docstrings_and_comments_may_differ(fake_model: Callable[..., str]) -> None:
    path = fake_model(
        '''
        import math


        def _ceil_div(a, b):
            return -(-a // b)  # a comment of its own


        # Adapted from image_processing_fake.grid
        def grid(height, width, patch):
            """A docstring of its own."""
            return _ceil_div(height, patch), _ceil_div(width, patch)
        '''
    )

    assert importable_processor_class(path)().count(30, 50, 7) == 5 * 8


@without_torchvision
def test_a_helper_defined_differently_in_the_pil_module_is_refused(fake_model: Callable[..., str]) -> None:
    path = fake_model(
        """
        def _ceil_div(a, b):
            return -(-a // b)


        def grid(height, width, patch):
            return _ceil_div(width, patch), _ceil_div(height, patch)
        """
    )

    with pytest.raises(
        ProcessorImportError, match=r"FakeProcessor \(.*processing_fake\).* grid is defined differently"
    ):
        importable_processor_class(path)


@without_torchvision
def test_a_difference_in_what_the_helper_calls_is_refused(fake_model: Callable[..., str]) -> None:
    path = fake_model(
        """
        def _ceil_div(a, b):
            return a // b


        def grid(height, width, patch):
            return _ceil_div(height, patch), _ceil_div(width, patch)
        """
    )

    with pytest.raises(ProcessorImportError, match=r"_ceil_div \(used by grid\) is defined differently"):
        importable_processor_class(path)


@without_torchvision
def test_a_name_the_pil_module_lacks_is_refused(fake_model: Callable[..., str]) -> None:
    path = fake_model(
        """
        def _ceil_div(a, b):
            return -(-a // b)
        """
    )

    with pytest.raises(ProcessorImportError, match=r"image_processing_pil_fake does not define grid"):
        importable_processor_class(path)


@without_torchvision
def test_a_processor_that_still_needs_torchvision_after_the_substitution_is_refused_and_not_kept(
    fake_model: Callable[..., str],
) -> None:
    """Its helpers come from the PIL module, but it imports torchvision through another module too."""
    path = fake_model(
        TORCHVISION_MODULE.replace("import torchvision\n", ""),
        processing="from .video_processing_fake import frames\n" + PROCESSING_MODULE,
        video_processing_fake="import torchvision\n\nframes = 2\n",
    )
    module = path.rpartition(".")[0]

    with pytest.raises(ProcessorImportError, match=r"FakeProcessor .* still imports torchvision"):
        importable_processor_class(path)
    assert module not in sys.modules


@without_torchvision
def test_the_import_state_afterwards_is_upstream_s_plus_the_processing_module(
    fake_model: Callable[..., str],
) -> None:
    """The processing module and the PIL module are imported under their names, as an import would; the torchvision
    module never is, and importing it later still fails on torchvision."""
    path = fake_model(TORCHVISION_MODULE.replace("import torchvision\n", ""))
    package = path.split(".")[0]
    before = set(sys.modules)

    importable_processor_class(path)

    assert set(sys.modules) - before == {package, f"{package}.processing_fake", f"{package}.image_processing_pil_fake"}
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(f"{package}.image_processing_fake")
    assert raised.value.name == "torchvision"
    assert "image_processing_fake" not in vars(sys.modules[package])
