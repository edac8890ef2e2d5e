"""``copier copy`` of a short-convolution hybrid: the mixer's convs are guarded and the rendered tests exercise them.

One copy (lfm2: dense, text-only); lfm3 and the rest of transformers 5.25's short-convolution models go through
``scaffold-survey`` (docs/scaffolding.md, "How far the scaffold reaches"); which fit or are refused is specified at
fit level in tests/upstream/test_fit_linear_attention.py.
"""

from __future__ import annotations

from pathlib import Path

from .repos import copy_and_generate
from .test_copy import _assert_ruff_clean, _assert_tests_pass


def test_a_short_convolution_hybrid_guards_its_convs_and_passes_its_decode_and_packed_document_tests(
    repo: Path,
) -> None:
    model_dir = copy_and_generate(repo, "lfm2")
    generated = (model_dir / "generated" / "patched_modeling_lfm2_gpu.py").read_text(encoding="utf-8")
    assert "causal_conv1d_slot(" in generated
    assert "causal_conv1d_update_slot(" in generated
    assert "gated_delta_rule_slot(" not in generated
    assert "@use_kernel_func_from_hub_with_fallback" not in generated
    test_file = (model_dir / "tests" / "test_lfm2_parity.py").read_text(encoding="utf-8")
    assert "class TestLfm2Parity(ShortConvolutionSuite, DenseParitySuite):" in test_file
    assert 'packed_mixer = "Lfm2ShortConv"' in test_file
    _assert_ruff_clean(repo, model_dir)
    output = _assert_tests_pass(repo, "lfm2")
    assert "hands no cu_seq_lens_q" not in output, "the packed-document test must run, not skip"
