"""scaffold-survey's tables, population, clones and workers, on fakes: no Copier, no model tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from modelgraft.generator.entrypoint import ExitStatus
from modelgraft.scaffold.survey import (
    categories,
    cli,
    clones,
    display,
    errors,
    model_run,
    population,
    processes,
    tables,
    workers,
)
from modelgraft.scaffold.survey.classify import BROKEN, PASS, REFUSED, WRONG, ModelResult, Observation, StepResult


def result(model: str, category: str, outcome: str, reason: str = "", slots: tuple[str, ...] = ()) -> ModelResult:
    return ModelResult(model, category, "", outcome, reason, slots, 1.0)


RESULTS = [
    result("mistral", "dense", PASS, slots=("rms_norm", "glu_activation", "rope", "causal_lm_loss")),
    result("apertus", "dense", REFUSED, "patchgen: error: ApertusMLP | not gated\nsecond line"),
    result("helium", "dense", WRONG, "models/helium/tests/x.py::t[gpu]: RuntimeError: shapes"),
    result("qwen2_moe", "moe", PASS, slots=("moe_experts", "causal_lm_loss")),
    result("dbrx", "moe", BROKEN, "timeout after 600 s: the tests of models/dbrx did not finish"),
    result("bart", "out_of_category", REFUSED, "out of category: encoder-decoder"),
]


# -- tables ---------------------------------------------------------------------------------------------------------


def test_summary_counts_each_category_and_the_pass_rates() -> None:
    rows = {row["category"]: row for row in tables.summarize(RESULTS)}
    assert list(rows) == ["dense", "moe", "out_of_category", "total"]
    assert {k: rows["dense"][k] for k in ("models", PASS, REFUSED, BROKEN, WRONG)} == {
        "models": 3, PASS: 1, REFUSED: 1, BROKEN: 0, WRONG: 1,
    }  # fmt: skip
    assert rows["dense"]["pass_rate"] == pytest.approx(1 / 3)
    assert rows["moe"]["pass_rate"] == 0.5 and rows["moe"]["target"] == 0.70
    assert rows["out_of_category"]["target"] is None
    assert rows["total"]["models"] == 6 and rows["total"][PASS] == 2


def test_markdown_tables() -> None:
    text = tables.markdown_tables(RESULTS)
    lines = text.splitlines()
    assert lines[0] == "| category | models | pass | refused | broken | wrong | pass rate | target |"
    assert "| dense | 3 | 1 | 1 | 0 | 1 | 33% | ≥ 85% (not met) |" in lines
    assert "| MoE | 2 | 1 | 0 | 1 | 0 | 50% | ≥ 70% (not met) |" in lines
    assert "| out of category | 1 | 0 | 1 | 0 | 0 | 0% |  |" in lines
    assert "| **total** | 6 | 2 | 2 | 1 | 1 | 33% |  |" in lines
    assert "| `mistral` | dense | pass | `rms_norm`, `glu_activation`, `rope`, `causal_lm_loss` |  |" in lines
    # A pipe in a reason is escaped, extra lines are counted, not printed.
    assert "| `apertus` | dense | refused |  | patchgen: error: ApertusMLP \\| not gated (+1 more) |" in lines
    models = [line.split("`")[1] for line in lines if line.startswith("| `")]
    assert tables.markdown_tables(RESULTS, caption="survey of 6").startswith("survey of 6\n\n| category |")
    assert models == ["apertus", "helium", "mistral", "dbrx", "qwen2_moe", "bart"]  # by category, then name


def test_plain_tables_list_what_did_not_pass() -> None:
    text = tables.plain_tables(RESULTS)
    assert text.splitlines()[0].split() == [
        "category",
        "models",
        "pass",
        "refused",
        "broken",
        "wrong",
        "pass",
        "rate",
        "target",
    ]
    assert "  apertus [dense] refused: patchgen: error: ApertusMLP | not gated (+1 more)" in text
    assert "  dbrx [MoE] broken: timeout after 600 s" in text
    assert "mistral" not in text.split("not passing:")[1]


def test_exit_code_fails_on_wrong_or_broken_only() -> None:
    """The shared table's statuses: a broken or wrong model is a finding (1), refusals are not."""
    assert tables.exit_code(RESULTS) is ExitStatus.FINDINGS
    assert tables.exit_code([r for r in RESULTS if r.outcome in (PASS, REFUSED)]) is ExitStatus.OK
    assert tables.exit_code([r for r in RESULTS if r.outcome != BROKEN]) is ExitStatus.FINDINGS


def test_model_line() -> None:
    line = tables.model_line(RESULTS[1], 2, 6)
    assert line == (
        "[2/6] apertus (dense): refused in 1.0 s; slots: -; patchgen: error: ApertusMLP | not gated (+1 more)"
    )


def test_json_output(tmp_path: Path) -> None:
    path = tmp_path / "survey.json"
    tables.write_json(path, RESULTS, {"transformers": "5.16.1"})
    payload = json.loads(path.read_text())
    assert payload["transformers"] == "5.16.1"
    assert payload["results"][0]["slots"] == ["rms_norm", "glu_activation", "rope", "causal_lm_loss"]
    assert payload["summary"][-1]["category"] == "total"


# -- the population ---------------------------------------------------------------------------------------------------


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    models = tmp_path / "transformers" / "models"
    write(
        models / "llama" / "modeling_llama.py",
        "class LlamaModel(X):\n    pass\nclass LlamaForCausalLM(X):\n    pass\n",
    )
    write(models / "mistral" / "modeling_mistral.py", "class MistralForCausalLM(MistralPreTrainedModel, G):\n")
    write(
        models / "qwen2_moe" / "modeling_qwen2_moe.py",
        "class Qwen2MoeSparseMoeBlock(nn.Module):\nclass Qwen2MoeForCausalLM(P):\n",
    )
    write(
        models / "bart" / "modeling_bart.py",
        "class BartEncoderLayer(M):\nclass BartForConditionalGeneration(P):\nclass BartForCausalLM(P):\n",
    )
    write(models / "bert" / "modeling_bert.py", "class BertForMaskedLM(P):\n    '''not a ForCausalLM'''\n")
    write(models / "auto" / "modeling_auto.py", "class AutoModelForCausalLM(_BaseAutoModelClass):\n")
    write(models / "tokenizer_only" / "tokenization_x.py", "class XForCausalLM:\n")
    write(models / "__init__.py")
    return models


def test_population_is_every_modeling_module_with_a_causal_lm(upstream: Path) -> None:
    assert population.causal_lm_models(upstream) == {
        "bart": "BartForCausalLM",
        "llama": "LlamaForCausalLM",
        "mistral": "MistralForCausalLM",
        "qwen2_moe": "Qwen2MoeForCausalLM",
    }


def test_a_causal_lm_named_otherwise_joins_the_population_by_the_auto_causal_lm_table(upstream: Path) -> None:
    write(
        upstream / "auto" / "modeling_auto.py",
        'MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = OrderedDict([("gpt2", "GPT2LMHeadModel"), ("llama", "LlamaForCausalLM")])\n',
    )
    write(upstream / "gpt2" / "modeling_gpt2.py", "class GPT2Model(P):\nclass GPT2LMHeadModel(P):\n")
    write(upstream / "ctrl" / "modeling_ctrl.py", "class CTRLLMHeadModel(P):\n")  # not in the table

    found = population.causal_lm_models(upstream)

    assert found["gpt2"] == "GPT2LMHeadModel"
    assert "ctrl" not in found


def test_multimodal_packages_without_a_causal_lm_are_found_by_their_conditional_generation_head(
    upstream: Path,
) -> None:
    write(upstream / "glm4v" / "modeling_glm4v.py", "class Glm4vModel(P):\nclass Glm4vForConditionalGeneration(P):\n")
    write(upstream / "t5" / "modeling_t5.py", "class T5ForConditionalGeneration(P):\n")
    # bart has a causal LM too: it is in the causal-LM population already.
    assert population.conditional_generation_models(upstream) == {
        "glm4v": "Glm4vForConditionalGeneration",
        "t5": "T5ForConditionalGeneration",
    }


def test_select_drops_the_zoo_and_checks_requested_names(upstream: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / "models" / "llama" / "llama_gpu_patch_gen_config.py")
    write(repo / "models" / "testing" / "parity.py")
    zoo = population.zoo_models(repo)
    assert zoo == {"llama"}
    found = population.causal_lm_models(upstream)
    assert population.select(found, zoo, []) == ["bart", "mistral", "qwen2_moe"]
    assert population.select(found, zoo, ["qwen2_moe", "mistral", "qwen2_moe"]) == ["qwen2_moe", "mistral"]
    with pytest.raises(errors.SurveyError, match=r"llama is in the zoo already.*bert: .*defines no causal LM"):
        population.select(found, zoo, ["llama", "bert"])


def test_guessed_categories(upstream: Path) -> None:
    read = lambda m: (upstream / m / f"modeling_{m}.py").read_text()
    assert categories.guess_category(read("mistral"))[0] == "dense"
    assert categories.guess_category(read("qwen2_moe"))[0] == "moe"
    assert categories.guess_category(read("bart"))[0] == "out_of_category"


def fake_clone(tmp_path: Path, reader: str | None) -> Path:
    clone = tmp_path / "clone"
    write(clone / "generator" / "__init__.py")
    write(clone / "generator" / "upstream" / "__init__.py")
    write(clone / "models" / "__init__.py")
    if reader is not None:
        write(clone / "generator" / "upstream" / "reader.py", reader)
    return clone


def test_categories_come_from_the_clones_reader(tmp_path: Path, upstream: Path) -> None:
    reader = (
        "from types import SimpleNamespace\n"
        "def read_model(model):\n"
        "    if model == 'bart':\n"
        "        raise ValueError('no decoder')\n"
        "    return SimpleNamespace(category='moe' if 'moe' in model else 'dense', category_reason='read')\n"
    )
    found = categories.read_categories(fake_clone(tmp_path, reader), ["mistral", "qwen2_moe", "bart"], upstream)
    assert found.warning == "" and found.reader.endswith("generator/upstream/reader.py")
    assert found.by_model == {
        "mistral": ("dense", "read"),
        "qwen2_moe": ("moe", "read"),
        "bart": ("unknown", "the reader failed: ValueError: no decoder"),
    }


@pytest.mark.parametrize(
    ("reader", "warning"),
    [
        (None, "modelgraft.generator.upstream.reader is missing: categories are guessed from class names"),
        ("def read_model(:\n", "modelgraft.generator.upstream.reader does not import: SyntaxError"),
    ],
)
def test_without_a_reader_categories_are_guessed_and_said_so(
    tmp_path: Path, upstream: Path, reader: str | None, warning: str
) -> None:
    found = categories.read_categories(fake_clone(tmp_path, reader), ["mistral", "qwen2_moe", "bart"], upstream)
    assert found.reader is None and found.warning.startswith(warning)
    assert {m: c for m, (c, _) in found.by_model.items()} == {
        "mistral": "dense", "qwen2_moe": "moe", "bart": "out_of_category",
    }  # fmt: skip


# -- clones ---------------------------------------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return clones.git(repo, *args)


def test_worktree_clone_holds_uncommitted_files_and_nothing_ignored_or_heavy(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root / ".gitignore", "ignored.txt\n")
    write(root / "copier.yml", "_subdirectory: template\n")
    write(root / "committed.py", "a = 1\n")
    git(root, "init", "--quiet")
    git(root, "add", "--all")
    git(root, "commit", "--quiet", "-m", "first")
    write(root / "committed.py", "a = 2\n")  # modified, not committed
    write(root / "new.py", "b = 1\n")  # untracked
    write(root / "ignored.txt", "x")
    write(root / ".venv" / "lib" / "big.py", "x")  # not ignored here, yet never copied
    (root / "gone.py").touch()
    git(root, "add", "gone.py")
    (root / "gone.py").unlink()  # tracked, deleted

    clone = clones.make_clone(root, tmp_path / "clone", from_worktree=True)
    files = sorted(
        p.relative_to(clone).as_posix() for p in clone.rglob("*") if ".git/" not in p.as_posix() + "/" and p.is_file()
    )
    assert files == [".gitignore", "committed.py", "copier.yml", "new.py"]
    assert (clone / "committed.py").read_text() == "a = 2\n"
    assert git(clone, "status", "--porcelain") == ""

    plain = clones.make_clone(root, tmp_path / "plain", from_worktree=False)
    assert (plain / "committed.py").read_text() == "a = 1\n" and not (plain / "new.py").exists()


def test_imports_must_resolve_inside_the_clone(tmp_path: Path) -> None:
    clone = fake_clone(tmp_path, None)
    clones.check_imports(clone)
    shutil.rmtree(clone / "models")  # with the bytecode the check's import left there
    # The installed (editable) checkout's models would be imported instead: refused.
    with pytest.raises(
        errors.SurveyError, match=r"Python imports .*models.* not the clone's|import generator, models"
    ):
        clones.check_imports(clone)


def test_a_timeout_ends_the_process_and_its_children(tmp_path: Path) -> None:
    runner = processes.Runner()
    start = time.monotonic()
    step = runner.run(["sh", "-c", "sleep 30 & echo started; sleep 30"], tmp_path, {"PATH": "/usr/bin:/bin"}, 1)
    assert step.timed_out and step.returncode is None and "started" in step.output
    assert time.monotonic() - start < 10


#: What the interpreters of the tests of forked runs import first: nothing, since what is tested is the process
#: handling (the survey's own runs preload torch and transformers; its end-to-end test runs one).
NOTHING: tuple[str, ...] = ()

#: A module a forked test run runs: it starts a child that outlives it unless its process group is ended, then waits.
SLEEPER = """
import subprocess, time
subprocess.Popen(["sleep", "30"])
print("started", flush=True)
time.sleep(30)
"""


def test_a_timeout_ends_a_forked_run_and_its_children(tmp_path: Path) -> None:
    write(tmp_path / "sleeper.py", SLEEPER)
    runner = processes.Runner(preload=NOTHING)
    try:
        start = time.monotonic()
        step = runner.run_module("sleeper", [], tmp_path, {"PATH": "/usr/bin:/bin"}, 1)
        assert step.timed_out and step.returncode is None and "started" in step.output
        assert time.monotonic() - start < 10
    finally:
        runner.close()


def test_stopping_the_runner_ends_a_forked_run_in_flight(tmp_path: Path) -> None:
    write(tmp_path / "sleeper.py", SLEEPER)
    runner = processes.Runner(preload=NOTHING)
    steps: list[StepResult] = []
    try:
        worker = threading.Thread(
            target=lambda: steps.append(runner.run_module("sleeper", [], tmp_path, {"PATH": "/usr/bin:/bin"}, 60))
        )
        start = time.monotonic()
        worker.start()
        while not (tmp_path / "ready").exists() and time.monotonic() - start < 30:
            if any(i.running for _, i in runner._interpreters.values()):
                (tmp_path / "ready").touch()
            time.sleep(0.05)
        runner.stop()
        worker.join(timeout=30)
        (step,) = steps
        assert step.timed_out and step.returncode is None
        assert time.monotonic() - start < 30
    finally:
        runner.close()


def test_a_run_whose_interpreter_has_ended_runs_in_a_fresh_process(tmp_path: Path) -> None:
    write(tmp_path / "hello.py", "print('hello')\n")
    runner = processes.Runner(preload=NOTHING)
    env = {"PATH": "/usr/bin:/bin"}
    try:
        assert runner.run_module("hello", [], tmp_path, env, 60).output == "hello\n"
        ((_, interpreter),) = runner._interpreters.values()
        interpreter.process.kill()  # as the kernel's out-of-memory killer would
        interpreter.process.wait()
        step = runner.run_module("hello", [], tmp_path, env, 60)
        assert (step.returncode, step.output) == (0, "hello\n")
        assert runner._interpreters == {}  # the next run starts a new one
    finally:
        runner.close()


def test_a_forked_run_imports_modelgraft_from_the_clone_it_is_given(tmp_path: Path) -> None:
    clone = fake_clone(tmp_path, None)
    write(tmp_path / "probe.py", "import modelgraft.models\nprint(modelgraft.models.__file__)\n")
    runner = processes.Runner(preload=NOTHING)
    try:
        step = runner.run_module("probe", [], tmp_path, clones.subprocess_env(clone, 1), 60)
    finally:
        runner.close()
    assert step.returncode == 0, step.output
    assert Path(step.output.strip()).resolve() == (clone / "models" / "__init__.py").resolve()


# -- the workers and the command --------------------------------------------------------------------------------------


def test_workers_survey_every_model_once_and_keep_the_order(capsys) -> None:
    seen: list[tuple[str, str]] = []

    def fake_survey_model(clone, model, category, runner, settings):
        seen.append((clone.name, model))
        time.sleep(0.01)
        copy = StepResult(("copier",), 1 if model == "b" else 0, "refused: no\n" if model == "b" else "")
        tests = StepResult(("pytest",), 0, "1 passed in 0.1s\n") if model != "b" else None
        slots = ("rms_norm", "rope", "causal_lm_loss")
        return Observation(model, copy, model != "b", (), tests, settings.timeout, slots)

    names = ["a", "b", "c", "d", "e"]
    results = workers.run_survey(
        lambda i: Path(f"clone{i}"),
        2,
        names,
        {"a": ("dense", "")},
        model_run.Settings(timeout=5),
        display.Display(len(names), tty=False),
        processes.Runner(),
        survey_one=fake_survey_model,
    )
    assert [r.model for r in results] == names
    assert [r.outcome for r in results] == [PASS, REFUSED, PASS, PASS, PASS]
    assert results[0].category == "dense" and results[1].category == "unknown"
    assert sorted(m for _, m in seen) == names and {c for c, _ in seen} <= {"clone0", "clone1"}
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and err[-1].startswith("[5/5] ")


def test_bad_arguments_exit_2(capsys) -> None:
    assert cli.main(["--bogus"]) == ExitStatus.BAD_INPUT
    assert cli.main(["--category", "encoder"]) == ExitStatus.BAD_INPUT
    capsys.readouterr()
    # The survey's own checks end through the shared handler: one line, as every console script prints it.
    for argv, cause in (
        (["-j", "0"], "-j/--jobs must be at least 1"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--timeout", "-1"], "--timeout must be positive"),
        (["--json", "/no/such/folder/x.json"], "--json /no/such/folder/x.json: /no/such/folder does not exist"),
    ):
        assert cli.main(argv) == ExitStatus.BAD_INPUT
        assert capsys.readouterr().err == f"scaffold-survey: error: {cause}\n"


def test_the_categories_are_the_tables() -> None:
    """--category takes the reader's categories, from the one table; the report labels them from it too."""
    from modelgraft.generator.categories import CATEGORIES

    choices = next(a.choices for a in cli.build_parser()._actions if "--category" in a.option_strings)
    assert tuple(choices) == tuple(c.name for c in CATEGORIES) == categories.category_names()
    assert categories.multimodal_categories() == tuple(c.name for c in CATEGORIES if c.towers)
    assert [tables._label(c.name) for c in CATEGORIES] == [c.label for c in CATEGORIES]
    assert tables._label("unknown") == "unknown"


def _fail_at_start(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    """The survey fails where it starts: finding the repository to clone."""

    def repository_root(start: Path) -> Path:
        raise error

    monkeypatch.setattr(cli, "repository_root", repository_root)


def test_a_survey_that_cannot_start_is_bad_input_through_the_shared_handler(monkeypatch, capsys) -> None:
    _fail_at_start(monkeypatch, errors.SurveyError("/tmp is not inside a git repository"))
    assert cli.main(["--limit", "1"]) == ExitStatus.BAD_INPUT
    assert capsys.readouterr().err == "scaffold-survey: error: /tmp is not inside a git repository\n"


def test_a_bug_in_the_survey_exits_3_with_its_traceback(monkeypatch, capsys) -> None:
    _fail_at_start(monkeypatch, RuntimeError("a bug"))
    assert cli.main(["--limit", "1"]) == ExitStatus.INTERNAL
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: a bug" in err and "scaffold-survey: internal error" in err


def test_an_interrupted_survey_exits_130_as_the_shell_reports_ctrl_c(monkeypatch, capsys) -> None:
    _fail_at_start(monkeypatch, KeyboardInterrupt())
    assert cli.main(["--limit", "1"]) == cli.EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err == "scaffold-survey: interrupted\n"


def test_the_survey_runs_without_importing_transformers_torch_or_the_generator() -> None:
    code = (
        "import sys, modelgraft.scaffold.survey\n"
        "heavy = ('torch', 'transformers', 'modelgraft.generator', 'modelgraft.models')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_interrupt_returns_only_after_every_worker_has_ended() -> None:
    """The clones are removed after run_survey returns: no worker may still be resetting one then."""
    import _thread
    import signal

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("interrupt_main needs the test to run in the main thread")
    # Ctrl-C as a terminal sends it, whatever handler an earlier test in this process left behind.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ended: list[str] = []
    both_running = threading.Barrier(2)

    def slow_survey_model(clone, model, category, runner, settings):
        # The interrupt comes while both workers are inside a model, however late a loaded machine starts them.
        if both_running.wait(timeout=60) == 0:
            _thread.interrupt_main()
        time.sleep(1.0)
        ended.append(model)
        return Observation(model, StepResult(("copier",), 1, "no\n"), False, (), None, settings.timeout)

    runner = processes.Runner()
    try:
        with pytest.raises(KeyboardInterrupt):
            workers.run_survey(
                lambda i: Path(f"clone{i}"),
                2,
                ["a", "b", "c"],
                {},
                model_run.Settings(),
                display.Display(3, tty=False),
                runner,
                survey_one=slow_survey_model,
            )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sorted(ended) == ["a", "b"] and runner.stopped.is_set()  # both running models ended, "c" never started
