"""``copier copy`` of a Gated DeltaNet hybrid: the mixer's slots are guarded and the rendered tests exercise them.

One copy only (the cheapest hybrid, olmo_hybrid: dense, text-only; where a user scaffolded it into this repository,
into a clone that no longer holds it, repos.py's ``without``): the other hybrids of transformers 5.25 go through
``scaffold-survey`` (docs/scaffolding.md, "How far the scaffold reaches"); which models fit or are refused is
specified at fit level in tests/upstream/test_fit_linear_attention.py.
"""

from __future__ import annotations

from pathlib import Path

from .repos import copy_and_generate, without
from .test_copy import _assert_ruff_clean, _assert_tests_pass

#: The slot calls the mixer's guards add to the generated module.
MIXER_SLOT_CALLS = (
    "rms_norm_gated_slot(",
    "causal_conv1d_slot(",
    "causal_conv1d_update_slot(",
    "chunk_gated_delta_rule_slot(",
    "recurrent_gated_delta_rule_slot(",
)


def test_a_gated_delta_net_hybrid_guards_its_mixer_and_passes_its_decode_and_packed_document_tests(
    repo: Path,
) -> None:
    model_dir = copy_and_generate(without(repo, "olmo_hybrid"), "olmo_hybrid")
    generated = (model_dir / "generated" / "patched_modeling_olmo_hybrid_gpu.py").read_text(encoding="utf-8")
    for call in MIXER_SLOT_CALLS:
        assert call in generated, call
    assert "@use_kernel_func_from_hub_with_fallback" not in generated
    test_file = (model_dir / "tests" / "test_olmo_hybrid_parity.py").read_text(encoding="utf-8")
    assert "class TestOlmoHybridParity(GatedDeltaNetSuite, DenseParitySuite):" in test_file
    _assert_ruff_clean(repo, model_dir)
    output = _assert_tests_pass(repo, "olmo_hybrid")
    assert "hands no cu_seq_lens_q" not in output, "the packed-document test must run, not skip"
