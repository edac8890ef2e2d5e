"""The classifier of scaffold-survey on faked process results: every outcome and the reason it gives."""

from __future__ import annotations

import pytest

from modelgraft.scaffold.survey.classify import (
    BROKEN,
    PASS,
    REFUSED,
    WRONG,
    Observation,
    StepResult,
    classify,
    exception_of,
    failing_test,
    guarded_slots,
    headline,
    refusal_reason,
    template_version,
)

COPIER_PREAMBLE = (
    "No git tags found in template; using HEAD as ref\n\n"
    "Copying from template version 0.0.0.post1.dev0+1753bb4\n"
    "\x1b[32m\x1b[1m    create\x1b[39m\x1b[0m  foo_gpu_patch_gen_config.py\n"
    "    create  .copier-answers.yml\n"
    "    create  tests\n"
    "    create  tests/__init__.py\n\n"
)
TASK = (
    ' > Running task 1 of 1: "/venv/bin/python3" -m modelgraft.generator models.foo.foo_gpu_patch_gen_config --diff\n'
)
PATCHGEN_REFUSAL = (
    "patchgen: error: config models.foo.foo_gpu_patch_gen_config (models/foo/foo_gpu_patch_gen_config.py), "
    "target FooForSequenceClassification.forward: upstream transformers.models.foo.modeling_foo defines no class "
    "'FooForSequenceClassification'\n"
)


def task_failed(status: int) -> str:
    return f"Task '\"/venv/bin/python3\" -m modelgraft.generator models.foo.foo_gpu_patch_gen_config --diff' returned non-zero exit status {status}.\n"


def ran_copier(output: str, returncode: int | None = 0, *, timed_out: bool = False) -> StepResult:
    return StepResult(("copier", "copy"), None if timed_out else returncode, output, 1.0, timed_out)


def ran_tests(output: str, returncode: int | None, *, timed_out: bool = False) -> StepResult:
    return StepResult(("pytest",), None if timed_out else returncode, output, 10.0, timed_out)


SLOTS = ("rms_norm", "glu_activation", "rope", "causal_lm_loss")


def observe(
    copy_step: StepResult, *, exists: bool, stray: tuple[str, ...] = (), test_step=None, slots=SLOTS
) -> Observation:
    return Observation("foo", copy_step, exists, stray, test_step, timeout=600, slots=slots if exists else ())


GENERATED_OK = COPIER_PREAMBLE + TASK + "wrote models/foo/generated/patched_modeling_foo_gpu.py\n"
PYTEST_PASSED = (
    "...............                                                          [100%]\n15 passed in 15.14s\n"
)
PYTEST_FAILED = """\
F
=================================== FAILURES ===================================
_ TestFooParity.test_causal_lm_logits_loss_and_gradients_match_upstream[gpu] _

self = <models.foo.tests.test_foo_parity.TestFooParity object at 0x7f>

    def test_causal_lm(self):
>       assert_step_parity(ours, theirs)
E       AssertionError: logits differ from upstream: max abs diff 0.18
E       assert False

models/testing/parity.py:88: AssertionError
=========================== short test summary info ============================
FAILED models/foo/tests/test_foo_parity.py::TestFooParity::test_causal_lm[gpu] - AssertionError: logits differ from upstream: max abs diff 0.18
!!!!!!!!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!!!!!!!!
1 failed in 3.10s
"""
PYTEST_COLLECTION_ERROR = """\

==================================== ERRORS ====================================
_____________ ERROR collecting models/foo/tests/test_foo_parity.py _____________
ImportError while importing test module '/tmp/x/models/foo/tests/test_foo_parity.py'.
E   ImportError: cannot import name 'FooConfig' from 'transformers'
=========================== short test summary info ============================
ERROR models/foo/tests/test_foo_parity.py
!!!!!!!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!!!!!!!!
1 error in 2.01s
"""
COPIER_VALIDATOR_TRACEBACK = """\
Traceback (most recent call last):
  File "/venv/bin/copier", line 8, in <module>
    sys.exit(CopierApp.run())
  File "/venv/lib/python3.11/site-packages/copier/_user_data.py", line 543, in _parse_answer
    raise ValueError(f"Invalid choice for '{self.var_name}': {error_detail}")
ValueError: Invalid choice for 'category': not yet: VLM models have no scaffold yet, only dense and MoE ones (docs/scaffolding.md)
"""
COPIER_CRASH = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/copier/_main.py", line 1291, in run_copy
    self._render_template()
jinja2.exceptions.UndefinedError: 'prefix_x' is undefined
"""
GENERATOR_CRASH = (
    COPIER_PREAMBLE
    + TASK
    + """\
patchgen: internal error (a bug in patchgen), please report it:
Traceback (most recent call last):
  File "/clone/generator/cli.py", line 200, in main
    plan = build(config)
KeyError: 'FooMLP'
"""
    + task_failed(3)
)


# -- pass ---------------------------------------------------------------------------------------------------------


def test_generated_and_tests_pass_is_pass() -> None:
    verdict = classify(observe(ran_copier(GENERATED_OK), exists=True, test_step=ran_tests(PYTEST_PASSED, 0)))
    assert (verdict.outcome, verdict.reason) == (PASS, "")


@pytest.mark.parametrize(
    "slots", [("rope", "causal_lm_loss", "sequence_classification_loss"), ("rms_norm", "glu_activation", "rope")]
)
def test_a_thin_scaffold_passes_with_a_note(slots: tuple[str, ...]) -> None:
    step = ran_tests(PYTEST_PASSED, 0)
    verdict = classify(observe(ran_copier(GENERATED_OK), exists=True, test_step=step, slots=slots))
    assert verdict.outcome == PASS
    assert verdict.reason == (
        f"thin scaffold: guards only {', '.join(slots)} (less than the causal LM loss and two slots)"
    )


# -- refused ------------------------------------------------------------------------------------------------------


def test_generator_refusal_with_nothing_left_is_refused_with_patchgen_message() -> None:
    output = COPIER_PREAMBLE + TASK + PATCHGEN_REFUSAL + task_failed(2)
    verdict = classify(observe(ran_copier(output, 1), exists=False))
    assert verdict.outcome == REFUSED
    assert verdict.reason == PATCHGEN_REFUSAL.strip()  # no file list, no task lines, no version


def test_questionnaire_validator_is_a_refusal_despite_copiers_traceback() -> None:
    verdict = classify(observe(ran_copier(COPIER_VALIDATOR_TRACEBACK, 1), exists=False))
    assert verdict.outcome == REFUSED
    assert verdict.reason == (
        "Invalid choice for 'category': not yet: VLM models have no scaffold yet, only dense and MoE ones "
        "(docs/scaffolding.md)"
    )


def test_refusal_keeps_its_first_meaningful_lines_only() -> None:
    listing = "".join(f"  - unsupported structure {i}: FooNorm (line {i})\n" for i in range(10))
    output = COPIER_PREAMBLE + "out of category: an encoder-decoder model\n" + listing
    verdict = classify(observe(ran_copier(output, 1), exists=False))
    assert verdict.outcome == REFUSED
    lines = verdict.reason.splitlines()
    assert lines[0] == "out of category: an encoder-decoder model"
    assert len(lines) == 6 and lines[1] == "  - unsupported structure 0: FooNorm (line 0)"
    assert headline(verdict.reason) == "unsupported structure 0: FooNorm (line 0) (+4 more)"


VALIDATOR_REFUSAL = (
    COPIER_VALIDATOR_TRACEBACK.rsplit("ValueError", 1)[0]
    + """\
ValueError: Validation error for question 'category': no scaffold for helium: upstream has structures no snippet handles
  - norm: HeliumRMSNorm (line 47): casts after scaling; override its forward by hand (override_method)
  - rope: apply_rotary_pos_emb (line 181): interleaved pairs; replace it by hand (replace_function)
Write the config by hand with the patches named above (docs/adding-a-model.md#hand-written-patches).
"""
)


def test_a_refusal_listing_structures_keeps_the_list_and_shows_its_first_item() -> None:
    verdict = classify(observe(ran_copier(VALIDATOR_REFUSAL, 1), exists=False))
    assert verdict.outcome == REFUSED
    assert verdict.reason.splitlines() == [
        "no scaffold for helium: upstream has structures no snippet handles",
        "  - norm: HeliumRMSNorm (line 47): casts after scaling; override its forward by hand (override_method)",
        "  - rope: apply_rotary_pos_emb (line 181): interleaved pairs; replace it by hand (replace_function)",
        "Write the config by hand with the patches named above (docs/adding-a-model.md#hand-written-patches).",
    ]
    assert headline(verdict.reason) == (
        "norm: HeliumRMSNorm (line 47): casts after scaling; override its forward by hand (override_method) (+1 more)"
    )


def test_refusal_without_any_message_still_has_a_reason() -> None:
    assert (
        classify(observe(ran_copier(COPIER_PREAMBLE, 1), exists=False)).reason == "the copy failed without a message"
    )


SMOKE_FAILED = (
    COPIER_PREAMBLE
    + TASK
    + "wrote models/foo/generated/patched_modeling_foo_gpu.py\n"
    + ' > Running task 2 of 2: "/venv/bin/python3" -m modelgraft.scaffold.smoke foo\n'
    + """\
Traceback (most recent call last):
  File "/clone/scaffold/smoke.py", line 46, in main
    smoke(args.model)
RuntimeError: mat1 and mat2 shapes cannot be multiplied (44x96 and 48x48)
scaffold smoke check: the new models/foo does not match upstream (RuntimeError: mat1 and mat2 shapes); Copier removes the directory
Task '"/venv/bin/python3" -m modelgraft.scaffold.smoke foo' returned non-zero exit status 1.
"""
)


def test_a_failed_smoke_check_is_a_refusal_that_says_so() -> None:
    verdict = classify(observe(ran_copier(SMOKE_FAILED, 1), exists=False))
    assert verdict.outcome == REFUSED
    assert verdict.reason.splitlines() == [
        "scaffold smoke check: the new models/foo does not match upstream (RuntimeError: mat1 and mat2 shapes); "
        + "Copier removes the directory",
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (44x96 and 48x48)",
    ]


def test_a_failed_smoke_check_that_leaves_files_is_broken() -> None:
    verdict = classify(observe(ran_copier(SMOKE_FAILED, 1), exists=True))
    assert verdict.outcome == BROKEN and verdict.reason.startswith("files left behind after a failed copy")


def test_copier_killed_by_a_signal_is_broken() -> None:
    verdict = classify(observe(ran_copier(COPIER_PREAMBLE, -9), exists=False))
    assert (verdict.outcome, verdict.reason) == (BROKEN, "copier was killed by signal 9")


def test_a_task_killed_by_a_signal_is_broken() -> None:
    output = COPIER_PREAMBLE + TASK + task_failed(-9)
    verdict = classify(observe(ran_copier(output, 1), exists=False))
    assert verdict.outcome == BROKEN and verdict.reason.startswith("a task of the copy was killed by signal 9")


# -- broken -------------------------------------------------------------------------------------------------------


def test_generator_exit_3_is_broken_with_its_exception() -> None:
    verdict = classify(observe(ran_copier(GENERATOR_CRASH, 1), exists=False))
    assert verdict.outcome == BROKEN
    assert verdict.reason == "the generator crashed (exit 3): KeyError: 'FooMLP'"


def test_copier_traceback_is_broken() -> None:
    verdict = classify(observe(ran_copier(COPIER_CRASH, 1), exists=False))
    assert verdict.outcome == BROKEN
    assert verdict.reason == "copier crashed: jinja2.exceptions.UndefinedError: 'prefix_x' is undefined"


def test_failed_copy_that_leaves_the_model_folder_is_broken() -> None:
    output = COPIER_PREAMBLE + TASK + PATCHGEN_REFUSAL + task_failed(2)
    verdict = classify(observe(ran_copier(output, 1), exists=True))
    assert verdict.outcome == BROKEN
    assert verdict.reason.startswith("files left behind after a failed copy: models/foo\npatchgen: error:")


def test_failed_copy_that_changes_other_files_is_broken() -> None:
    output = COPIER_PREAMBLE + TASK + PATCHGEN_REFUSAL + task_failed(2)
    verdict = classify(observe(ran_copier(output, 1), exists=False, stray=("models/__init__.py",)))
    assert verdict.outcome == BROKEN
    assert headline(verdict.reason) == "files left behind after a failed copy: models/__init__.py (+1 more)"


def test_successful_copy_writing_outside_its_folder_is_broken() -> None:
    verdict = classify(observe(ran_copier(GENERATED_OK), exists=True, stray=(".patchgen_x",), test_step=None))
    assert verdict == classify(observe(ran_copier(GENERATED_OK), exists=True, stray=(".patchgen_x",)))
    assert verdict.outcome == BROKEN and ".patchgen_x" in verdict.reason


def test_successful_copy_without_the_folder_is_broken() -> None:
    verdict = classify(observe(ran_copier(GENERATED_OK), exists=False))
    assert verdict.outcome == BROKEN and "models/foo does not exist" in verdict.reason


@pytest.mark.parametrize(
    ("observation", "where"),
    [
        (observe(ran_copier("", timed_out=True), exists=False), "the copy"),
        (
            observe(ran_copier(GENERATED_OK), exists=True, test_step=ran_tests("...", None, timed_out=True)),
            "the tests",
        ),
    ],
)
def test_timeouts_are_broken(observation: Observation, where: str) -> None:
    verdict = classify(observation)
    assert verdict.outcome == BROKEN
    assert verdict.reason.startswith("timeout after 600 s: " + where)


def test_pytest_internal_error_is_broken() -> None:
    output = "INTERNALERROR> Traceback (most recent call last):\nINTERNALERROR> ...\n"
    verdict = classify(observe(ran_copier(GENERATED_OK), exists=True, test_step=ran_tests(output, 3)))
    assert verdict.outcome == BROKEN and verdict.reason.startswith("pytest exited 3")


# -- wrong --------------------------------------------------------------------------------------------------------


def test_failing_test_is_wrong_with_the_test_and_its_assertion_line() -> None:
    verdict = classify(observe(ran_copier(GENERATED_OK), exists=True, test_step=ran_tests(PYTEST_FAILED, 1)))
    assert verdict.outcome == WRONG
    assert verdict.reason == (
        "models/foo/tests/test_foo_parity.py::TestFooParity::test_causal_lm[gpu]: "
        "AssertionError: logits differ from upstream: max abs diff 0.18"
    )


def test_collection_error_is_wrong() -> None:
    verdict = classify(observe(ran_copier(GENERATED_OK), exists=True, test_step=ran_tests(PYTEST_COLLECTION_ERROR, 2)))
    assert verdict.outcome == WRONG
    assert verdict.reason == (
        "collecting models/foo/tests/test_foo_parity.py: ImportError: cannot import name 'FooConfig' from 'transformers'"
    )


def test_no_tests_or_only_skipped_tests_is_wrong() -> None:
    none = classify(observe(ran_copier(GENERATED_OK), exists=True, test_step=ran_tests("no tests ran in 0.01s\n", 5)))
    assert (none.outcome, none.reason) == (WRONG, "no tests collected in models/foo")
    skipped = classify(
        observe(ran_copier(GENERATED_OK), exists=True, test_step=ran_tests("ss\n2 skipped in 0.1s\n", 0))
    )
    assert skipped.outcome == WRONG and "skipped" in skipped.reason


def test_failing_test_without_short_summary_uses_the_section_title() -> None:
    output = PYTEST_FAILED.split("=========================== short test summary")[0]
    assert failing_test(output) == (
        "TestFooParity.test_causal_lm_logits_loss_and_gradients_match_upstream[gpu]: "
        "AssertionError: logits differ from upstream: max abs diff 0.18"
    )


# -- helpers ------------------------------------------------------------------------------------------------------


def test_template_version_and_exception_parsing() -> None:
    assert template_version(GENERATED_OK) == "0.0.0.post1.dev0+1753bb4"
    assert template_version("nothing") is None
    assert exception_of(COPIER_CRASH) == "jinja2.exceptions.UndefinedError: 'prefix_x' is undefined"
    assert exception_of("no traceback here") is None
    assert refusal_reason("\x1b[31mout of category: SSM hybrid\x1b[0m\n") == "out of category: SSM hybrid"


def test_headline_cuts_long_reasons() -> None:
    assert headline("x" * 50, width=10) == "x" * 9 + "…"
    assert headline("") == ""


GENERATED_MODULE = """
class FooRMSNorm:
    def forward(self, hidden_states):
        if rms_norm_slot.use_non_eager_impl:
            return rms_norm_slot(hidden_states)

def apply_rotary_pos_emb(q, k, cos, sin):
    if rope_slot.use_non_eager_impl:
        return rope_slot(q, k, cos, sin)

class FooForCausalLM:
    def forward(self, labels=None):
        if labels is not None and causal_lm_loss_slot.use_non_eager_impl:
            pass
        if custom_thing_slot.use_non_eager_impl and rms_norm_slot.use_non_eager_impl:
            pass
        if self.use_non_eager_impl or other.slot.use_non_eager_impl:
            pass

class FooMLP:
    def forward(self, x):
        if glu_activation_slot.use_non_eager_impl:
            pass
"""


def test_guarded_slots_in_canonical_order_then_unknown_ones() -> None:
    assert guarded_slots(GENERATED_MODULE) == ("rms_norm", "glu_activation", "rope", "causal_lm_loss", "custom_thing")


def test_guarded_slots_list_a_gated_delta_net_mixers_slots_in_slot_order_not_in_order_of_appearance() -> None:
    source = "\n".join(
        f"{slot}_slot.use_non_eager_impl"
        for slot in ("causal_conv1d_update", "rms_norm_gated", "recurrent_gated_delta_rule", "causal_conv1d")
    )
    assert guarded_slots(source) == (
        "rms_norm_gated",
        "causal_conv1d",
        "causal_conv1d_update",
        "recurrent_gated_delta_rule",
    )


def test_guarded_slots_of_a_module_that_does_not_parse() -> None:
    assert guarded_slots("def f(:\n    rope_slot.use_non_eager_impl\n") == ("rope",)
    assert guarded_slots("") == ()
