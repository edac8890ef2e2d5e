"""``from_pretrained`` / ``save_pretrained`` of every generated class interoperate with upstream transformers.

Every registered (model_type, backend) of a causal LM is a case, read from the registry at collection time, so
a new model is covered without an edit here. Each case uses the generated module's ``*ForCausalLM`` at the
tiny config of ``modelgraft.models.testing.tiny`` (fp32, eager attention, eager experts); every floating weight
gets noise first, so a weight left at its initialisation, or filled from the wrong tensor, changes
the logits. Upstream's ``save_pretrained`` writes its own hub layout (qwen3_moe: per-expert keys;
deepseek_v4: partly DeepSeek's names), which only the ``model_type``'s conversion mapping reads back.
What makes the conversions and strict loading apply is written in each generated module's
``<Prefix>PreTrainedModel`` (docs/design.md, "What a generated class changes against upstream"), so a
class behaves the same however it was obtained; no import step adopts it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import PreTrainedConfig, PreTrainedModel
from transformers.conversion_mapping import USER_REGISTERED_MAPPINGS
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from modelgraft import models
from modelgraft.models.checkpoint import CheckpointError
from modelgraft.models.loader import get_model_class
from modelgraft.models.registry import MODEL_CONFIG_REGISTRY, MODEL_PROCESSOR_REGISTRY, MODELING_REGISTRY
from modelgraft.models.testing.batches import causal_lm_batch
from modelgraft.models.testing.loading import loaded_alike
from modelgraft.models.testing.preloaded_python import run_code
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.tiny import tiny_config_for

REPO_ROOT = Path(models.__file__).resolve().parent.parent

#: Multimodal models (a processor registered) are left to their own suite, which builds their batches with
#: their processor: ``modelgraft.models.testing.vlm_suite`` runs these checks on images, videos and text. So are
#: model types without a causal LM upstream (the vision encoders of composed VLMs, ``siglip_vision_model``), whose
#: checks need pixel values: ``modelgraft.models.testing.vision_encoder_suite`` round-trips them.
CASES = [
    (model_type, backend)
    for model_type in MODELING_REGISTRY
    if model_type not in MODEL_PROCESSOR_REGISTRY and model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    for backend in MODELING_REGISTRY.backends(model_type)
]
CASE_IDS = [f"{model_type}-{backend}" for model_type, backend in CASES]

#: Implementations pinned on both sides: from_pretrained would otherwise pick sdpa / grouped_mm.
EAGER = {"attn_implementation": "eager", "experts_implementation": "eager"}

#: A tensor no model has, added to a checkpoint (no conversion mapping renames it).
PROBE_KEY = "model.interop_probe.weight"


def _causal_lm_name(model_type: str, backend: str) -> str:
    """The one ``*ForCausalLM`` of the generated module that upstream also has; anything else fails the case."""
    module = MODELING_REGISTRY.get_module(model_type, backend)
    names = [
        name
        for name, value in vars(module).items()
        if name.endswith("ForCausalLM")
        and isinstance(value, type)
        and value.__module__ == module.__name__
        and isinstance(getattr(transformers, name, None), type)
    ]
    assert len(names) == 1, f"{module.__name__}: expected one upstream *ForCausalLM, found {names}"
    return names[0]


def _config(model_type: str) -> PreTrainedConfig:
    return tiny_config_for(MODEL_CONFIG_REGISTRY[model_type], experts_implementation="eager")


def _noisy(model: PreTrainedModel) -> PreTrainedModel:
    """``model`` in eval mode with noise on every floating tensor of its state dict (zero biases included)."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.02 * torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype))
    return model.eval()


def _source(cls: type[PreTrainedModel], config: PreTrainedConfig) -> PreTrainedModel:
    seed_everything(0)
    return _noisy(cls(config))


def _upstream_and_generated(model_type: str, backend: str) -> tuple[type[PreTrainedModel], type[PreTrainedModel]]:
    name = _causal_lm_name(model_type, backend)
    return get_model_class(model_type, name, use_hf=True), get_model_class(model_type, name, backend=backend)


def _saved_keys(folder: Path) -> set[str]:
    keys: set[str] = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            keys.update(handle.keys())
    return keys


def _rewrite_checkpoint(folder: Path, *, drop: str | None = None, add: str | None = None) -> None:
    """Edit the single-file checkpoint upstream's save_pretrained wrote (tiny models fit one shard)."""
    file = folder / "model.safetensors"
    tensors = load_file(str(file))
    if drop is not None:
        del tensors[drop]
    if add is not None:
        tensors[add] = torch.zeros(3)
    save_file(tensors, str(file), metadata={"format": "pt"})


def _unrenamed_norm_key(saved: set[str], model: PreTrainedModel) -> str:
    """A saved norm weight that keeps its name in the model, the outermost one (no conversion touches it)."""
    candidates = sorted((key for key in saved & set(model.state_dict()) if key.endswith("norm.weight")), key=len)
    assert candidates, f"no norm weight keeps its name between the checkpoint and {type(model).__name__}"
    return candidates[0]


def _model_classes(model_type: str, backend: str) -> dict[str, type[PreTrainedModel]]:
    """Every model class the generated module defines, by name."""
    module = MODELING_REGISTRY.get_module(model_type, backend)
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, PreTrainedModel) and value.__module__ == module.__name__
    }


#: Every generated class that upstream transformers also exports (base models, causal LMs, heads), per backend.
CLASS_CASES = [
    (model_type, backend, name)
    for model_type, backend in CASES
    for name in sorted(_model_classes(model_type, backend))
    if not name.endswith("PreTrainedModel")
    and isinstance(getattr(transformers, name, None), type)
    # A module registered under two model types (gemma3: text and VLM) serves each its own classes.
    and getattr(transformers, name).config_class.__name__ == MODEL_CONFIG_REGISTRY.path(model_type).rpartition(".")[2]
]
CLASS_IDS = [f"{model_type}-{backend}-{name}" for model_type, backend, name in CLASS_CASES]


def _outputs(model: PreTrainedModel) -> list[torch.Tensor]:
    """Every tensor a forward of ``model`` returns (logits, hidden states, start/end logits, ...)."""
    batch = causal_lm_batch(model.config)
    del batch["labels"]
    with torch.no_grad():
        output = model(**batch, use_cache=False)
    return [value for value in output.to_tuple() if torch.is_tensor(value)]


def _assert_same_outputs(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> None:
    assert expected and len(actual) == len(expected)
    assert all(torch.equal(got, want) for got, want in zip(actual, expected, strict=True))


@pytest.mark.parametrize(("model_type", "backend", "name"), CLASS_CASES, ids=CLASS_IDS)
def test_upstream_save_pretrained_loads_in_the_generated_from_pretrained_to_equal_outputs(
    model_type: str, backend: str, name: str, tmp_path: Path
) -> None:
    upstream_cls = get_model_class(model_type, name, use_hf=True)
    source = _source(upstream_cls, _config(model_type))
    source.save_pretrained(tmp_path)
    generated_cls = get_model_class(model_type, name, backend=backend)
    generated = generated_cls.from_pretrained(tmp_path, **EAGER)
    assert type(generated) is generated_cls
    upstream = loaded_alike(source, tmp_path, **EAGER)
    _assert_same_outputs(_outputs(generated), _outputs(upstream))


@pytest.mark.parametrize(("model_type", "backend", "name"), CLASS_CASES, ids=CLASS_IDS)
def test_generated_save_pretrained_loads_in_upstream_from_pretrained_to_equal_outputs(
    model_type: str, backend: str, name: str, tmp_path: Path
) -> None:
    generated_cls = get_model_class(model_type, name, backend=backend)
    source = _source(generated_cls, _config(model_type))
    source.save_pretrained(tmp_path)
    upstream, info = get_model_class(model_type, name, use_hf=True).from_pretrained(
        tmp_path, output_loading_info=True, **EAGER
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    generated = loaded_alike(source, tmp_path, **EAGER)
    _assert_same_outputs(_outputs(upstream), _outputs(generated))


@pytest.mark.parametrize(("model_type", "backend"), CASES, ids=CASE_IDS)
def test_generated_save_pretrained_writes_the_keys_upstream_writes(
    model_type: str, backend: str, tmp_path: Path
) -> None:
    """The reverse conversion runs on save too (qwen3_moe: per-expert keys, as upstream writes them)."""
    upstream_cls, generated_cls = _upstream_and_generated(model_type, backend)
    config = _config(model_type)
    _source(upstream_cls, config).save_pretrained(tmp_path / "upstream")
    _source(generated_cls, config).save_pretrained(tmp_path / "generated")
    assert _saved_keys(tmp_path / "generated") == _saved_keys(tmp_path / "upstream")


@pytest.mark.parametrize(("model_type", "backend"), CASES, ids=CASE_IDS)
def test_generated_from_pretrained_raises_on_a_missing_weight(model_type: str, backend: str, tmp_path: Path) -> None:
    upstream_cls, generated_cls = _upstream_and_generated(model_type, backend)
    upstream = _source(upstream_cls, _config(model_type))
    upstream.save_pretrained(tmp_path)
    dropped = _unrenamed_norm_key(_saved_keys(tmp_path), upstream)
    _rewrite_checkpoint(tmp_path, drop=dropped)
    with pytest.raises(CheckpointError, match="missing from the checkpoint") as raised:
        generated_cls.from_pretrained(tmp_path, **EAGER)
    message = str(raised.value)
    assert str(tmp_path) in message and generated_cls.__qualname__ in message and dropped in message


@pytest.mark.parametrize(("model_type", "backend"), CASES, ids=CASE_IDS)
def test_generated_from_pretrained_raises_on_an_unexpected_weight(
    model_type: str, backend: str, tmp_path: Path
) -> None:
    upstream_cls, generated_cls = _upstream_and_generated(model_type, backend)
    _source(upstream_cls, _config(model_type)).save_pretrained(tmp_path)
    _rewrite_checkpoint(tmp_path, add=PROBE_KEY)
    with pytest.raises(CheckpointError, match="not in the model") as raised:
        generated_cls.from_pretrained(tmp_path, **EAGER)
    message = str(raised.value)
    assert str(tmp_path) in message and generated_cls.__qualname__ in message and PROBE_KEY in message


@pytest.mark.parametrize(("model_type", "backend"), CASES, ids=CASE_IDS)
def test_strict_false_loads_an_incomplete_checkpoint_and_reports_the_keys(
    model_type: str, backend: str, tmp_path: Path
) -> None:
    upstream_cls, generated_cls = _upstream_and_generated(model_type, backend)
    upstream = _source(upstream_cls, _config(model_type))
    upstream.save_pretrained(tmp_path)
    dropped = _unrenamed_norm_key(_saved_keys(tmp_path), upstream)
    _rewrite_checkpoint(tmp_path, drop=dropped, add=PROBE_KEY)
    model, info = generated_cls.from_pretrained(tmp_path, strict=False, output_loading_info=True, **EAGER)
    assert type(model) is generated_cls
    assert dropped in info["missing_keys"] and PROBE_KEY in info["unexpected_keys"]


@pytest.mark.parametrize(("model_type", "backend"), CASES, ids=CASE_IDS)
def test_every_model_class_of_a_generated_module_counts_as_transformers_own_code(
    model_type: str, backend: str
) -> None:
    """``is_custom_code`` false is what makes transformers apply the model_type's conversion mapping."""
    classes = list(_model_classes(model_type, backend).values())
    assert classes
    assert [cls.__name__ for cls in classes if cls.is_custom_code()] == []


@pytest.mark.parametrize(("model_type", "backend"), CASES, ids=CASE_IDS)
def test_every_model_class_of_a_generated_module_loads_through_the_module_s_own_from_pretrained(
    model_type: str, backend: str
) -> None:
    """The strict from_pretrained is a method written in the generated file, inherited by every class."""
    module_name = MODELING_REGISTRY.module_path(model_type, backend)
    classes = _model_classes(model_type, backend)
    assert classes
    assert {
        name: (cls.from_pretrained.__func__.__module__, cls.from_pretrained.__func__.__qualname__)
        for name, cls in classes.items()
    } == {name: (module_name, _pretrained_base(classes).__qualname__ + ".from_pretrained") for name in classes}


def _pretrained_base(classes: dict[str, type[PreTrainedModel]]) -> type[PreTrainedModel]:
    """The module's ``<Prefix>PreTrainedModel``: the one class every other class derives from."""
    bases = [cls for name, cls in classes.items() if name.endswith("PreTrainedModel")]
    assert len(bases) == 1, bases
    return bases[0]


def test_a_subclass_written_outside_the_generated_module_is_custom_code_again() -> None:
    """Its layout is not known to be upstream's, so transformers' own rule applies to it."""
    model_type, backend = CASES[0]
    base = get_model_class(model_type, _causal_lm_name(model_type, backend), backend=backend)
    subclass = type("UserVariant", (base,), {})
    assert not base.is_custom_code()
    assert subclass.is_custom_code()


def test_upstream_classes_and_transformers_registry_are_left_alone() -> None:
    """Nothing is registered globally with transformers, so remote code of a zoo model_type is unaffected."""
    for model_type, backend in CASES:
        upstream_cls, _ = _upstream_and_generated(model_type, backend)
        assert upstream_cls.from_pretrained.__func__ is PreTrainedModel.from_pretrained.__func__, upstream_cls
        assert upstream_cls.is_custom_code.__func__ is PreTrainedModel.is_custom_code.__func__, upstream_cls
    assert not USER_REGISTERED_MAPPINGS & set(MODELING_REGISTRY)


#: A model whose upstream checkpoint layout differs from its module layout (per-expert keys on disk, fused
#: experts in the model), so only the conversion mapping makes a load or a save right.
CONVERTED_MODEL_TYPE = "qwen3_moe"


def test_a_class_from_a_plain_import_converts_checkpoints_both_ways(tmp_path: Path) -> None:
    """Fresh interpreter, no registry or loader: a plain import of the generated module is the whole set-up."""
    module = MODELING_REGISTRY.module_path(CONVERTED_MODEL_TYPE, "gpu")
    name = _causal_lm_name(CONVERTED_MODEL_TYPE, "gpu")
    code = f"""
import torch, transformers
from safetensors import safe_open
from {module} import {name} as Generated
from modelgraft.models.testing.tiny import tiny_config_for

config = tiny_config_for({MODEL_CONFIG_REGISTRY.path(CONVERTED_MODEL_TYPE)}, experts_implementation="eager")
upstream = getattr(transformers, "{name}")(config)
upstream.save_pretrained("{tmp_path}/upstream")
loaded = Generated.from_pretrained("{tmp_path}/upstream", attn_implementation="eager", experts_implementation="eager")
expected = upstream.state_dict()
assert all(torch.equal(v, expected[k]) for k, v in loaded.state_dict().items()), "fused experts not loaded"
loaded.save_pretrained("{tmp_path}/generated")
keys = lambda d: set(safe_open(f"{tmp_path}/{{d}}/model.safetensors", framework="pt").keys())
assert keys("generated") == keys("upstream"), keys("generated") ^ keys("upstream")
"""
    result = run_code(code, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
