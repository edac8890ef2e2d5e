"""The primitives on a real upstream file: ``transformers.models.qwen2.modeling_qwen2`` of the pinned transformers.

One config uses every primitive at once; it is generated once per module
(generation reads transformers from disk and never imports it), then each
test checks one effect, and one test imports the result in a fresh process (forked from one that imported torch and
transformers and nothing of modelgraft, ``preloaded_python.run_code``: those imports are not what it tests, and cost
most of a fresh interpreter's run).
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelgraft.models.testing.preloaded_python import run_code

from .conftest import toy_project
from .projects import REPO_ROOT, class_source, section

#: Facts of the pinned transformers' qwen2 file: expected to move with upstream when the pin moves.
pytestmark = pytest.mark.upstream_facts

QWEN2 = "transformers.models.qwen2.modeling_qwen2"

CONFIG = f'''
"""Qwen2 with one patch of every kind: the engine's real-file fixture."""

from __future__ import annotations

from modelgraft.generator import PatchConfig, create_patch_from_external

config = PatchConfig({QWEN2!r}, "patched_modeling_qwen2_gpu.py", description="engine test")
config.add_post_import_block("QWEN2_BLOCK_MARKER = 'block'\\n")
config.add_patch(
    create_patch_from_external(
        "Qwen2RotaryEmbedding",
        "transformers.models.llama.modeling_llama",
        "LlamaRotaryEmbedding",
        description="external marker",
    )
)


@config.add_helper(description="helper marker")
def qwen2_helper_marker(x):
    return x


def _mlp_name_written_for_llama(self):
    # LLAMA-REUSED-BODY: the class name below is an identifier, renamed by name_map
    return LlamaMLP.__name__


config.override_method(
    "Qwen2DecoderLayer.mlp_class_name",
    replacement=_mlp_name_written_for_llama,
    name_map={{"Llama": "Qwen2"}},
    add=True,
    description="reused marker",
)
config.exclude_from_output("Qwen2ForQuestionAnswering")
config.drop_import_names("GenericForQuestionAnswering")
config.add_import("collections", names=["OrderedDict"])


@config.override_method("Qwen2MLP.forward", description="mlp marker")
def mlp_forward(self, x):
    # QWEN2-MLP-PATCH-COMMENT
    self.patched_forward_calls = getattr(self, "patched_forward_calls", 0) + 1
    down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
    return down_proj


config.replace_class(
    "Qwen2RMSNorm",
    description="rmsnorm marker",
    replacement="""
class Qwen2RMSNorm(nn.Module):
    PATCHED_MARKER = "rmsnorm"

    def __init__(self, hidden_size, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # QWEN2-RMSNORM-PATCH-COMMENT
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
""",
)


@config.replace_function("rotate_half", description="rotate marker")
def rotate_half(x):
    """Rotates half the hidden dims of the input (patched)."""
    # QWEN2-ROTATE-PATCH-COMMENT
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


@config.modify_init("Qwen2Model", description="init marker")
def model_init(self, config: Qwen2Config):
    self.patched_init_marker = OrderedDict(layers=config.num_hidden_layers)


@config.override_method("Qwen2ForCausalLM.get_parallel_plan", add=True, description="added method")
def get_parallel_plan(self):
    return {{"lm_head": "colwise"}}


@config.override_method("Qwen2ForSequenceClassification.forward", description="inherited forward")
def sequence_classification_forward(
    self,
    input_ids: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.LongTensor | None = None,
    cache: Cache | None = None,
    inputs_embeds: torch.FloatTensor | None = None,
    labels: torch.LongTensor | None = None,
    use_cache: bool | None = None,
    **kwargs: Unpack[TransformersKwargs],
):
    # QWEN2-SEQCLS-PATCH-COMMENT
    return GenericForSequenceClassification.forward(
        self, input_ids, attention_mask, position_ids, cache, inputs_embeds, labels, use_cache, **kwargs
    )
'''


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(generated file, its text) for CONFIG."""
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        toy_project(tmp_path_factory.mktemp("qwen2"), monkeypatch) as project,
    ):
        project.config("qwen2", CONFIG)
        result = project.run(project.module("qwen2"), "--diff")
        assert result.code == 0, result.err
        yield project.output("qwen2"), project.generated("qwen2")


def test_real_file_header_names_the_pinned_transformers(qwen2):
    _, text = qwen2
    assert f"# Source: {QWEN2} (transformers==5.25.0)\n" in text


def test_real_file_override_method_replaces_the_method_and_keeps_the_class(qwen2):
    _, text = qwen2
    cls = class_source(text, "Qwen2MLP")
    assert cls.startswith("# [MODIFIED CLASS] Qwen2MLP\nclass Qwen2MLP(nn.Module):\n    def __init__(self, config):\n")
    assert (
        "    # [PATCHED METHOD] Qwen2MLP.forward: mlp marker\n    def forward(self, x):\n        # QWEN2-MLP-PATCH-COMMENT\n"
        in cls
    )


def test_real_file_replace_class_keeps_the_upstream_class_decorator(qwen2):
    _, text = qwen2
    cls = class_source(text, "Qwen2RMSNorm")
    assert cls.startswith(
        '# [PATCHED CLASS] Qwen2RMSNorm: rmsnorm marker\n@use_kernel_forward_from_hub("RMSNorm")\nclass Qwen2RMSNorm(nn.Module):\n'
    )
    assert "# QWEN2-RMSNORM-PATCH-COMMENT" in cls
    assert "def extra_repr" not in cls


def test_real_file_replace_function_keeps_the_patch_docstring_and_comments(qwen2):
    _, text = qwen2
    fn = class_source(text, "rotate_half")
    assert fn.startswith(
        '# [PATCHED FUNCTION] rotate_half: rotate marker\ndef rotate_half(x):\n    """Rotates half the hidden dims of the input (patched)."""\n'
        "    # QWEN2-ROTATE-PATCH-COMMENT\n"
    )


def test_real_file_modify_init_appends_to_the_upstream_init(qwen2):
    _, text = qwen2
    init = section(section(text, "class Qwen2Model(Qwen2PreTrainedModel):"), "def __init__", "def forward")
    assert (
        "        self.post_init()\n        # [MODIFIED INIT] Qwen2Model: init marker\n        self.patched_init_marker = "
        in init
    )


def test_real_file_added_method_is_appended_to_its_class(qwen2):
    _, text = qwen2
    cls = class_source(text, "Qwen2ForCausalLM")
    assert (
        "    # [ADDED METHOD] Qwen2ForCausalLM.get_parallel_plan: added method\n    def get_parallel_plan(self):\n"
        in cls
    )


def test_real_file_inherited_method_override_keeps_the_base_method_decorators(qwen2):
    _, text = qwen2
    cls = class_source(text, "Qwen2ForSequenceClassification")
    assert cls.startswith(
        "# [MODIFIED CLASS] Qwen2ForSequenceClassification\n"
        "class Qwen2ForSequenceClassification(GenericForSequenceClassification, Qwen2PreTrainedModel):\n"
        "    # [PATCHED METHOD] Qwen2ForSequenceClassification.forward: inherited forward\n"
        '    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")\n'
        "    @can_return_tuple\n"
        "    @auto_docstring\n"
        "    def forward(\n"
    )
    assert "pass" not in cls


def test_real_file_exclude_drops_the_class_and_its_all_entry(qwen2):
    _, text = qwen2
    assert "class Qwen2ForQuestionAnswering" not in text
    assert '"Qwen2ForQuestionAnswering"' not in text
    assert '    "Qwen2ForSequenceClassification",\n    "Qwen2ForTokenClassification",\n]\n' in text  # layout kept


def test_real_file_drop_import_names_removes_the_name_from_its_import(qwen2):
    _, text = qwen2
    assert "GenericForQuestionAnswering" not in text
    assert "GenericForSequenceClassification," in section(text, "from transformers.modeling_layers import", ")")


def test_real_file_every_relative_import_became_absolute(qwen2):
    _, text = qwen2
    assert "from ." not in text
    assert "from transformers.models.qwen2.configuration_qwen2 import Qwen2Config\n" in text


def test_real_file_post_import_block_and_helper_follow_the_imports(qwen2):
    _, text = qwen2
    block = text.index('QWEN2_BLOCK_MARKER = "block"')
    helper = text.index("# [HELPERS]: helper marker\ndef qwen2_helper_marker(x):")
    assert text.index("from transformers.models.qwen2.configuration_qwen2 import Qwen2Config") < block < helper
    assert helper < text.index("class Qwen2MLP")


def test_real_file_external_class_points_at_the_other_implementation(qwen2):
    _, text = qwen2
    assert (
        "# [PATCHED CLASS] Qwen2RotaryEmbedding: external marker\n"
        "from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding as Qwen2RotaryEmbedding\n"
    ) in text
    assert "class Qwen2RotaryEmbedding(" not in text


def test_real_file_name_map_renames_identifiers_of_a_reused_body(qwen2):
    _, text = qwen2
    method = section(text, "# [ADDED METHOD] Qwen2DecoderLayer.mlp_class_name: reused marker", "__name__")
    assert "    def mlp_class_name(self):\n" in method
    assert "# LLAMA-REUSED-BODY" in method
    assert "        return Qwen2MLP.__name__\n" in text


def test_real_file_diff_is_against_the_upstream_file(qwen2):
    path, _ = qwen2
    diff = path.with_suffix(".diff").read_text(encoding="utf-8")
    assert diff.startswith("--- a/transformers/models/qwen2/modeling_qwen2.py\n+++ b/patched_modeling_qwen2_gpu.py\n")
    assert "-class Qwen2ForQuestionAnswering(GenericForQuestionAnswering, Qwen2PreTrainedModel):\n" in diff


def test_real_file_output_imports_and_runs_a_tiny_model(qwen2):
    path, _ = qwen2
    script = textwrap.dedent(
        """
        import sys

        import torch
        from transformers import Qwen2Config

        import patched_modeling_qwen2_gpu as m

        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        assert m.Qwen2RMSNorm.PATCHED_MARKER == "rmsnorm"
        assert m.QWEN2_BLOCK_MARKER == "block" and m.qwen2_helper_marker(3) == 3
        assert m.Qwen2RotaryEmbedding is LlamaRotaryEmbedding
        assert not hasattr(m, "Qwen2ForQuestionAnswering")
        config = Qwen2Config(
            vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
        )
        torch.manual_seed(0)
        model = m.Qwen2ForCausalLM(config)
        assert model.get_parallel_plan() == {"lm_head": "colwise"}
        assert model.model.patched_init_marker == {"layers": 1}
        assert model.model.layers[0].mlp_class_name() == "Qwen2MLP"
        logits = model(torch.tensor([[1, 2, 3]])).logits
        assert tuple(logits.shape) == (1, 3, 32), logits.shape
        assert model.model.layers[0].mlp.patched_forward_calls == 1
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(folder) for folder in (path.parent, REPO_ROOT))}
    result = run_code(script, cwd=path.parent, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


OMNI = "transformers.models.qwen2_5_omni.modeling_qwen2_5_omni"

OMNI_CONFIG = f"""
from modelgraft.generator import PatchConfig

config = PatchConfig({OMNI!r}, "patched_modeling_qwen2_5_omni_gpu.py")
config.exclude_from_output(
    "Qwen2_5OmniForConditionalGeneration",
    "Qwen2_5OmniTalkerForConditionalGeneration",
    "Qwen2_5OmniTalkerModel",
    "Qwen2_5OmniToken2WavModel",
    "Qwen2_5OmniToken2WavDiTModel",
    "Qwen2_5OmniToken2WavBigVGANModel",
)
"""


@pytest.fixture(scope="module")
def omni_thinker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Omni file with its top-level wrapper, talker and vocoder entry point excluded."""
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        toy_project(tmp_path_factory.mktemp("omni"), monkeypatch) as project,
    ):
        project.config("qwen2_5_omni", OMNI_CONFIG)
        result = project.run(project.module("qwen2_5_omni"))
        assert result.code == 0, result.err
        yield project.generated("qwen2_5_omni")


def test_real_file_exclusion_keeps_public_classes_only_an_excluded_class_used(omni_thinker):
    # Only the excluded wrapper refers to the thinker, but it is upstream's public API (__all__).
    assert "class Qwen2_5OmniThinkerForConditionalGeneration(" in omni_thinker
    assert "class Qwen2_5OmniThinkerTextModel(" in omni_thinker


def test_real_file_exclusion_drops_private_members_only_excluded_classes_used(omni_thinker):
    assert "class Qwen2_5OmniTalkerModel(" not in omni_thinker
    assert "class Qwen2_5OmniTalkerCausalLMOutputWithPast(" not in omni_thinker
    assert "class RungeKutta4ODESolver" not in omni_thinker
