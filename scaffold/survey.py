"""``scaffold-survey``: measure the scaffolder on every decoder-only model of the pinned transformers.

For each model of the population (every package under the installed ``transformers/models/`` whose
``modeling_<m>.py`` defines a ``*ForCausalLM`` class, minus the zoo's ``models/<m>/``), in a temporary clone
of this repository, the survey does what a new user would:

    copier copy --trust --defaults -d model=<m> . models/<m>
    python -m pytest models/<m> -q -x -p no:cacheprovider

and classifies the outcome (``modelgraft.scaffold.survey_classify``): pass, refused, broken or wrong, with the reason and
the op slots the generated GPU modeling guards. A summary per category (from ``modelgraft.generator.upstream.reader``,
run inside the clone) ends the run; ``--json`` writes every result, ``--markdown`` prints the tables as
Markdown for docs/scaffolding.md.

The clone is, by default, this checkout's working tree (tracked files and new ones git does not ignore,
committed once in a fresh repository: ``--from-worktree``), so uncommitted work is surveyed;
``--no-from-worktree`` makes a plain ``git clone`` (committed state only). Each worker has its own clone and
removes ``models/<m>`` after each model. Processes run with this interpreter, ``cwd`` and ``PYTHONPATH`` set
to the clone, so they import the clone's ``generator`` and ``models`` (checked before the first model).

This process never imports transformers, torch or the generator: the population is found by path.

Exit codes: 0 no model is wrong or broken; 1 some are; 2 bad arguments, or a survey that could not start.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from modelgraft.scaffold.import_root import import_root
from modelgraft.scaffold.survey_classify import (
    BROKEN,
    OUTCOMES,
    PASS,
    REFUSED,
    WRONG,
    ModelResult,
    Observation,
    StepResult,
    classify,
    guarded_slots,
    headline,
    strip_ansi,
    template_version,
)

EXIT_OK, EXIT_FAILURES, EXIT_USAGE = 0, 1, 2

#: The categories of generator.upstream.structure.CATEGORIES (not imported: this process stays light).
CATEGORIES = ("dense", "moe", "vlm", "vlm_moe", "omni", "omni_moe", "out_of_category")
UNKNOWN = "unknown"
#: Pass-rate targets of issue 6 for transformers 5.16.1.
TARGETS = {"dense": 0.85, "moe": 0.70}
#: Packages of transformers/models/ that are not models.
NOT_MODELS = frozenset({"auto", "deprecated"})

_CAUSAL_LM = re.compile(r"^class\s+(\w+ForCausalLM)\s*[(:]", re.MULTILINE)

_GIT_CONFIG = (
    "-c", "user.name=scaffold-survey", "-c", "user.email=scaffold-survey@example.invalid",
    "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "init.defaultBranch=main",
)  # fmt: skip

#: Top-level folders never copied into a worktree clone, whatever git says (a virtualenv is heavy).
_HEAVY = frozenset({".venv", "venv", ".git", "node_modules", ".tox", ".nox"})


class SurveyError(Exception):
    """Bad arguments or a survey that cannot start (exit 2)."""


# -- the population ------------------------------------------------------------------------------------------


def transformers_models_dir() -> Path:
    """``transformers/models`` of the installed transformers, found without importing it."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        raise SurveyError("transformers is not installed in this environment")
    path = Path(next(iter(spec.submodule_search_locations))) / "models"
    if not path.is_dir():
        raise SurveyError(f"{path} does not exist")
    return path


def transformers_version() -> str:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def causal_lm_models(models_dir: Path) -> dict[str, str]:
    """Every package of ``models_dir`` whose ``modeling_<m>.py`` defines a ``*ForCausalLM``: name -> class."""
    found = {}
    for package in sorted(models_dir.iterdir()):
        modeling = package / f"modeling_{package.name}.py"
        if package.name in NOT_MODELS or not modeling.is_file():
            continue
        match = _CAUSAL_LM.search(modeling.read_text(encoding="utf-8", errors="replace"))
        if match:
            found[package.name] = match.group(1)
    return found


def zoo_models(repo: Path) -> set[str]:
    """The zoo: every ``models/<m>/`` holding a patch config."""
    return {path.parent.name for path in repo.glob("models/*/*_patch_gen_config.py")}


# -- categories: generator.upstream.reader, run in the clone ----------------------------------------------------

_READER_SCRIPT = r"""
import json, sys
names = json.loads(sys.stdin.read())
try:
    import modelgraft.generator.upstream.reader as reader_module
    read_model = reader_module.read_model
except ModuleNotFoundError as error:
    if error.name not in ("modelgraft.generator.upstream.reader", "modelgraft.generator.upstream", "generator"):
        result = {"reader": None, "error": f"modelgraft.generator.upstream.reader does not import: {type(error).__name__}: {error}"}
    else:
        result = {"reader": None, "error": "modelgraft.generator.upstream.reader is missing"}
except Exception as error:
    result = {"reader": None, "error": f"modelgraft.generator.upstream.reader does not import: {type(error).__name__}: {error}"}
else:
    models = {}
    for name in names:
        try:
            structure = read_model(name)
            models[name] = {
                "category": str(getattr(structure, "category", "unknown")),
                "reason": str(getattr(structure, "category_reason", "") or ""),
            }
        except Exception as error:
            models[name] = {"category": "unknown", "reason": f"the reader failed: {type(error).__name__}: {error}"}
    result = {"reader": reader_module.__file__, "models": models}
print("SURVEY-JSON:" + json.dumps(result))
"""

_GUESS_MOE = re.compile(
    r"^class\s+\w*(?:Experts|SparseMoeBlock|MoeBlock|MoE|MoELayer|MoeLayer)\w*\s*[(:]", re.MULTILINE
)
_GUESS_OUT = re.compile(
    r"^class\s+\w*(?:ForConditionalGeneration|ForMaskedLM|ForSeq2SeqLM|Mamba\w*Mixer|EncoderLayer)\w*\s*[(:]",
    re.MULTILINE,
)


def guess_category(modeling_source: str) -> tuple[str, str]:
    """A category from class names alone, for when the reader is missing: moe, out_of_category or dense."""
    note = "guessed from class names (no generator.upstream.reader)"
    if _GUESS_OUT.search(modeling_source):
        return "out_of_category", note
    if _GUESS_MOE.search(modeling_source):
        return "moe", note
    return "dense", note


@dataclass(frozen=True)
class Categories:
    by_model: dict[str, tuple[str, str]]
    #: The reader's file in the clone, or None when it was missing (categories then guessed).
    reader: str | None
    warning: str = ""


def read_categories(clone: Path, names: Sequence[str], models_dir: Path, timeout: float = 600) -> Categories:
    """Each model's category and its reason, by the clone's reader; guessed when the reader is missing."""
    if not names:
        return Categories({}, None)
    error = ""
    try:
        result = subprocess.run(
            [sys.executable, "-c", _READER_SCRIPT],
            input=json.dumps(list(names)),
            cwd=clone,
            env=subprocess_env(clone),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        error = f"modelgraft.generator.upstream.reader took more than {timeout:g} s"
        payload: dict = {}
    else:
        lines = [line for line in result.stdout.splitlines() if line.startswith("SURVEY-JSON:")]
        payload = json.loads(lines[-1][len("SURVEY-JSON:") :]) if lines else {}
        if not lines:
            error = "running generator.upstream.reader failed: " + (result.stderr.strip().splitlines() or ["?"])[-1]
        error = payload.get("error") or error
    if payload.get("reader"):
        models = payload["models"]
        return Categories({n: (models[n]["category"], models[n]["reason"]) for n in names}, payload["reader"])
    guessed = {}
    for name in names:
        source = (models_dir / name / f"modeling_{name}.py").read_text(encoding="utf-8", errors="replace")
        guessed[name] = guess_category(source)
    return Categories(guessed, None, f"{error}: categories are guessed from class names")


# -- clones and processes -------------------------------------------------------------------------------------------


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["git", *_GIT_CONFIG, *args], cwd=repo, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise SurveyError(f"git {' '.join(args)} failed in {repo}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def repository_root(start: Path) -> Path:
    found = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        raise SurveyError(f"{start} is not inside a git repository: run scaffold-survey in the modelgraft repository")
    root = Path(found.stdout.strip()).resolve()
    if not (root / "copier.yml").is_file():
        raise SurveyError(f"{root} has no copier.yml: run scaffold-survey in the modelgraft repository")
    return root


def worktree_files(root: Path) -> list[str]:
    """The working tree as git sees it: tracked files that exist and new ones it does not ignore; none heavy."""
    listed = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").stdout
    paths = []
    for path in sorted(set(listed.split("\0"))):
        if not path or path.split("/", 1)[0] in _HEAVY:
            continue
        full = root / path
        if full.is_file() or full.is_symlink():
            paths.append(path)
    return paths


def make_clone(root: Path, dest: Path, *, from_worktree: bool) -> Path:
    """A repository at ``dest`` holding ``root``'s working tree in one commit, or a plain ``git clone``."""
    if not from_worktree:
        git(root, "clone", "--quiet", str(root), str(dest))
        return dest
    dest.mkdir(parents=True)
    for path in worktree_files(root):
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, target, follow_symlinks=False)
    git(dest, "init", "--quiet")
    git(dest, "add", "--all")
    git(dest, "commit", "--quiet", "--no-verify", "-m", "scaffold-survey: the working tree of " + str(root))
    return dest


def subprocess_env(clone: Path, threads: int | None = None) -> dict[str, str]:
    """This environment, importing modelgraft from the clone (scaffold/import_root.py), no pytest options leak in."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTEST_ADDOPTS", "PYTHONHOME"}}
    env.update(PYTHONPATH=str(import_root(clone)), NO_COLOR="1", TERM="dumb", PYTHONUNBUFFERED="1")
    if threads is not None:
        for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(variable, str(threads))
    return env


def copier_command() -> list[str]:
    """The ``copier`` script beside this interpreter, else ``python -m copier``."""
    script = Path(sys.executable).parent / ("copier.exe" if os.name == "nt" else "copier")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "copier"]


def check_imports(clone: Path) -> None:
    """The clone's processes must import the clone's generator and models, not the checkout the survey runs from."""
    probe = "import modelgraft.generator as g, modelgraft.models as m; print(g.__file__); print(m.__file__)"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=clone,
        env=subprocess_env(clone),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SurveyError(
            f"in the clone {clone}, `import modelgraft.generator, modelgraft.models` fails:\n{result.stderr.strip()}"
        )
    for line in result.stdout.split():
        if not Path(line).resolve().is_relative_to(clone.resolve()):
            raise SurveyError(f"in the clone {clone}, Python imports {line}: not the clone's (check PYTHONPATH)")


class Runner:
    """Runs processes in their own process groups, so a timeout or Ctrl-C ends them with their children."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self.stopped = threading.Event()

    def run(self, argv: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> StepResult:
        start = time.monotonic()
        with self._lock:  # a stop() either sees this process or comes before it starts
            if self.stopped.is_set():
                return StepResult(tuple(argv), None, "interrupted", 0.0, timed_out=True)
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
            )
            self._running.add(process)
        try:
            output, _ = process.communicate(timeout=max(timeout, 1.0))
            timed_out = False
        except subprocess.TimeoutExpired:
            self._kill(process)
            try:
                output, _ = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # a descendant in a session of its own holds the pipe
                output = ""
            timed_out = True
        finally:
            with self._lock:
                self._running.discard(process)
        code = None if timed_out else process.returncode
        return StepResult(tuple(argv), code, output or "", time.monotonic() - start, timed_out)

    @staticmethod
    def _kill(process: subprocess.Popen) -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the group this Popen started (start_new_session)
        except (ProcessLookupError, PermissionError):
            process.kill()

    def stop(self) -> None:
        with self._lock:
            self.stopped.set()
            for process in list(self._running):
                self._kill(process)


@dataclass(frozen=True)
class Settings:
    timeout: float = 600.0
    vcs_ref: str | None = None
    pass_category: bool = False
    threads: int | None = None


def _changed_paths(clone: Path) -> list[str]:
    status = git(clone, "status", "--porcelain", "--untracked-files=all", check=False).stdout
    return [line[3:].strip().strip('"') for line in status.splitlines() if line.strip()]


def reset_clone(clone: Path, model: str) -> None:
    """Remove ``models/<m>`` (ignored files included) and undo anything else the copy changed."""
    git(clone, "clean", "-fdxq", "--", f"models/{model}", check=False)
    if _changed_paths(clone):
        git(clone, "checkout", "--quiet", "--", ".", check=False)
        git(clone, "clean", "-fdq", check=False)


def copier_categories(clone: Path) -> tuple[str, ...]:
    """The values of the questionnaire's ``category`` choices (copier.yml of the clone)."""
    import yaml

    try:
        questions = yaml.safe_load((clone / "copier.yml").read_text(encoding="utf-8")) or {}
        choices = questions.get("category", {}).get("choices", {})
    except (OSError, yaml.YAMLError, AttributeError):
        return ()
    if isinstance(choices, list):
        return tuple(str(choice) for choice in choices)
    values = []
    for value in choices.values() if isinstance(choices, dict) else ():
        values.append(str(value.get("value") if isinstance(value, dict) else value))
    return tuple(values)


def survey_model(clone: Path, model: str, category: str, runner: Runner, settings: Settings) -> Observation:
    """Copy ``model`` into ``clone`` as a new user would, run its tests; what happened (the clone is reset)."""
    env = subprocess_env(clone, settings.threads)
    argv = [*copier_command(), "copy", "--trust", "--defaults", "-d", f"model={model}"]
    if settings.pass_category and category in copier_categories(clone):
        argv += ["-d", f"category={category}"]
    if settings.vcs_ref:
        argv += ["--vcs-ref", settings.vcs_ref]
    argv += [".", f"models/{model}"]
    start = time.monotonic()
    dest = clone / "models" / model
    try:
        copy = runner.run(argv, clone, env, settings.timeout)
        dest_exists = dest.exists()
        stray = tuple(
            p for p in _changed_paths(clone) if not p.startswith(f"models/{model}/") and p != f"models/{model}"
        )
        tests = None
        if copy.returncode == 0 and dest_exists and not stray:
            left = settings.timeout - (time.monotonic() - start)
            pytest_argv = [sys.executable, "-m", "pytest", f"models/{model}", "-q", "-x", "-p", "no:cacheprovider"]
            tests = runner.run(pytest_argv, clone, env, left)
        generated = dest / "generated" / f"patched_modeling_{model}_gpu.py"
        slots = guarded_slots(generated.read_text(encoding="utf-8")) if generated.is_file() else ()
    finally:
        reset_clone(clone, model)
    return Observation(model, copy, dest_exists, stray, tests, settings.timeout, slots)


def result_of(observation: Observation, category: tuple[str, str], seconds: float) -> ModelResult:
    verdict = classify(observation)
    details = {
        "copy": {"returncode": observation.copy.returncode, "seconds": round(observation.copy.seconds, 2),
                 "timed_out": observation.copy.timed_out, "output_tail": strip_ansi(observation.copy.output)[-4000:]},
    }  # fmt: skip
    if observation.tests is not None:
        details["tests"] = {
            "returncode": observation.tests.returncode,
            "seconds": round(observation.tests.seconds, 2),
            "timed_out": observation.tests.timed_out,
            "output_tail": strip_ansi(observation.tests.output)[-4000:],
        }
    if observation.stray:
        details["stray"] = list(observation.stray)
    return ModelResult(
        model=observation.model,
        category=category[0],
        category_reason=category[1],
        outcome=verdict.outcome,
        reason=verdict.reason,
        slots=observation.slots,
        seconds=round(seconds, 2),
        template_version=template_version(observation.copy.output),
        details=details,
    )


# -- the tables ------------------------------------------------------------------------------------------------------


def category_order(categories: Iterable[str]) -> list[str]:
    known = [c for c in CATEGORIES if c in set(categories)]
    return known + sorted(set(categories) - set(CATEGORIES))


def summarize(results: Sequence[ModelResult]) -> list[dict]:
    """One row per category, then the total: the counts of each outcome and the pass rate."""
    rows = []
    groups: dict[str, list[ModelResult]] = {}
    for result in results:
        groups.setdefault(result.category, []).append(result)
    for category in [*category_order(groups), "total"]:
        members = list(results) if category == "total" else groups[category]
        row = {"category": category, "models": len(members)}
        row.update({outcome: sum(1 for r in members if r.outcome == outcome) for outcome in OUTCOMES})
        row["pass_rate"] = row[PASS] / len(members) if members else 0.0
        row["target"] = TARGETS.get(category)
        rows.append(row)
    return rows


def _rate(row: dict) -> str:
    return f"{100 * row['pass_rate']:.0f}%" if row["models"] else "-"


def _target(row: dict) -> str:
    if row["target"] is None:
        return ""
    met = "met" if row["models"] and row["pass_rate"] >= row["target"] else "not met"
    return f"≥ {100 * row['target']:.0f}% ({met})"


def _label(category: str) -> str:
    return {"out_of_category": "out of category", "moe": "MoE", "vlm": "VLM", "vlm_moe": "VLM + MoE"}.get(
        category, category.replace("_", " ")
    )


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_tables(results: Sequence[ModelResult], *, width: int = 160, caption: str | None = None) -> str:
    """The summary and the per-model results as Markdown tables (for docs/scaffolding.md)."""
    out = [caption, ""] if caption else []
    out += [
        "| category | models | pass | refused | broken | wrong | pass rate | target |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in summarize(results):
        name = "**total**" if row["category"] == "total" else _label(row["category"])
        out.append(
            f"| {name} | {row['models']} | {row[PASS]} | {row[REFUSED]} | {row[BROKEN]} | {row[WRONG]} "
            f"| {_rate(row)} | {_target(row)} |"
        )
    out += ["", "| model | category | outcome | slots guarded | reason |", "|---|---|---|---|---|"]
    for result in sorted(
        results, key=lambda r: (category_order([r.category, *CATEGORIES]).index(r.category), r.model)
    ):
        slots = ", ".join(f"`{s}`" for s in result.slots)
        out.append(
            f"| `{result.model}` | {_label(result.category)} | {result.outcome} | {slots} "
            f"| {_md_cell(headline(result.reason, width))} |"
        )
    return "\n".join(out) + "\n"


def plain_tables(results: Sequence[ModelResult]) -> str:
    """The summary as aligned text, then every model that did not pass with its reason."""
    header = ("category", "models", "pass", "refused", "broken", "wrong", "pass rate", "target")
    rows = [header]
    for row in summarize(results):
        rows.append((_label(row["category"]), str(row["models"]), str(row[PASS]), str(row[REFUSED]),
                     str(row[BROKEN]), str(row[WRONG]), _rate(row), _target(row)))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    failures = [r for r in results if r.outcome != PASS]
    if failures:
        lines += ["", "not passing:"]
        for r in sorted(failures, key=lambda r: (OUTCOMES.index(r.outcome), r.model)):
            lines.append(f"  {r.model} [{_label(r.category)}] {r.outcome}: {headline(r.reason, 200)}")
    return "\n".join(lines) + "\n"


def rich_summary(results: Sequence[ModelResult]):  # -> rich.table.Table
    from rich.table import Table

    table = Table(title="scaffold-survey")
    for column in ("category", "models", "pass", "refused", "broken", "wrong", "pass rate", "target"):
        table.add_column(column, justify="left" if column in ("category", "target") else "right")
    for row in summarize(results):
        style = "bold" if row["category"] == "total" else None
        table.add_row(_label(row["category"]), str(row["models"]), str(row[PASS]), str(row[REFUSED]),
                      str(row[BROKEN]), str(row[WRONG]), _rate(row), _target(row), style=style)  # fmt: skip
    return table


def exit_code(results: Sequence[ModelResult]) -> int:
    return EXIT_FAILURES if any(r.outcome in (BROKEN, WRONG) for r in results) else EXIT_OK


def model_line(result: ModelResult, done: int, total: int) -> str:
    slots = ",".join(result.slots) or "-"
    text = f"[{done}/{total}] {result.model} ({_label(result.category)}): {result.outcome} in {result.seconds:.1f} s"
    text += f"; slots: {slots}"
    if result.reason:
        text += f"; {headline(result.reason, 240)}"
    return text


# -- the command -------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaffold-survey",
        description=(
            "Scaffold every decoder-only model of the installed transformers that is not in the zoo, in a "
            "temporary clone (copier copy, then the model's tests), and report pass / refused / broken / wrong."
        ),
    )
    parser.add_argument("models", nargs="*", metavar="MODEL", help="survey only these (default: the population)")
    parser.add_argument("--category", choices=CATEGORIES, help="only models the reader puts in this category")
    parser.add_argument("--limit", type=int, metavar="N", help="at most N models (after the other filters)")
    parser.add_argument(
        "-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
        help="worker processes, each with its own clone (default: the number of cores)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S", help="seconds per model (default 600)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clones (their path is printed)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every result as JSON to PATH")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown (docs/scaffolding.md)")
    parser.add_argument(
        "--from-worktree", action=argparse.BooleanOptionalAction, default=True,
        help="survey the working tree, uncommitted files included (default); --no-from-worktree: a git clone",
    )  # fmt: skip
    parser.add_argument("--vcs-ref", metavar="REF", help="passed to copier copy (default: what Copier picks)")
    parser.add_argument(
        "--pass-category", action="store_true",
        help="also answer -d category=<the reader's category> (default: the questionnaire decides)",
    )  # fmt: skip
    return parser


def _validate(args: argparse.Namespace) -> None:
    if args.jobs < 1:
        raise SurveyError("-j/--jobs must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise SurveyError("--limit must be at least 1")
    if args.timeout <= 0:
        raise SurveyError("--timeout must be positive")
    if args.json is not None and not args.json.resolve().parent.is_dir():
        raise SurveyError(f"--json {args.json}: {args.json.resolve().parent} does not exist")


def select(upstream: dict[str, str], zoo: set[str], requested: Sequence[str]) -> list[str]:
    """The models to survey: the requested ones (checked), else every upstream causal LM not in the zoo."""
    if not requested:
        return [name for name in sorted(upstream) if name not in zoo]
    problems = []
    for name in requested:
        if name in zoo:
            problems.append(f"{name} is in the zoo already (models/{name}/)")
        elif name not in upstream:
            problems.append(f"{name}: transformers/models/{name}/modeling_{name}.py defines no *ForCausalLM")
    if problems:
        raise SurveyError("; ".join(problems))
    return list(dict.fromkeys(requested))


class Display:
    """A rich progress bar on a terminal, else one plain line per model (both on stderr)."""

    def __init__(self, total: int, *, tty: bool) -> None:
        self.total = total
        self.done = 0
        self.tty = tty
        self._progress = None
        if tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("[bold]scaffold-survey"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.description}"), console=Console(stderr=True),
            )  # fmt: skip
            self._task = self._progress.add_task("", total=total)

    def __enter__(self) -> Display:  # noqa: PYI034
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def message(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr, flush=True)

    def started(self, running: Sequence[str]) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=", ".join(running))

    def finished(self, result: ModelResult) -> None:
        self.done += 1
        line = model_line(result, self.done, self.total)
        if self._progress is not None:
            colour = {PASS: "green", REFUSED: "yellow", BROKEN: "red", WRONG: "red"}[result.outcome]
            from rich.text import Text

            text = Text(line)
            text.highlight_words([f": {result.outcome} in"], style=colour)
            self._progress.console.print(text)
            self._progress.advance(self._task)
        else:
            print(line, file=sys.stderr, flush=True)


def run_survey(
    clone_for: Callable[[int], Path],
    jobs: int,
    names: Sequence[str],
    categories: dict[str, tuple[str, str]],
    settings: Settings,
    display: Display,
    runner: Runner,
) -> list[ModelResult]:
    """Survey ``names`` with ``jobs`` worker threads, worker i in ``clone_for(i)``; results in ``names``' order."""
    work: queue.Queue[str] = queue.Queue()
    for name in names:
        work.put(name)
    results: dict[str, ModelResult] = {}
    running: list[str] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    count = max(1, min(jobs, len(names)))
    # One event per worker, set when it ends: a Thread.join interrupted by Ctrl-C may later return early
    # (CPython's _wait_for_tstate_lock), and the clones must outlive every worker.
    ended = [threading.Event() for _ in range(count)]

    def worker(index: int) -> None:
        try:
            work_in(index)
        finally:
            ended[index].set()

    def work_in(index: int) -> None:
        try:
            clone = clone_for(index)
        except Exception as error:  # noqa: BLE001 - reported when no worker could start
            failures.append(error)
            display.message(f"scaffold-survey: worker {index} could not start: {error}")
            return
        while not runner.stopped.is_set():
            try:
                name = work.get_nowait()
            except queue.Empty:
                return
            with lock:
                running.append(name)
                display.started(running)
            start = time.monotonic()
            category = categories.get(name, (UNKNOWN, ""))
            try:
                observation = survey_model(clone, name, category[0], runner, settings)
                result = result_of(observation, category, time.monotonic() - start)
            except Exception as error:  # noqa: BLE001 - the survey itself failed on this model
                result = ModelResult(name, category[0], category[1], BROKEN,
                                     f"the survey failed on this model: {type(error).__name__}: {error}",
                                     seconds=round(time.monotonic() - start, 2))  # fmt: skip
            with lock:
                running.remove(name)
                if not runner.stopped.is_set():
                    results[name] = result
                    display.finished(result)
                display.started(running)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    try:
        for event in ended:
            while not event.wait(0.2):
                pass
    except KeyboardInterrupt:
        runner.stop()
        for event in ended:
            while not event.wait(0.2):
                runner.stop()  # a process started after the first stop
        raise
    if len(failures) == len(threads):
        raise SurveyError(f"no worker could start: {failures[0]}")
    return [results[name] for name in names if name in results]


class _CloneFactory:
    """Worker i's clone, made on first use: ``<base>/worker-<i>/modelgraft``, its imports checked."""

    def __init__(self, root: Path, base: Path, *, from_worktree: bool) -> None:
        self.root, self.base, self.from_worktree = root, base, from_worktree
        self._made: dict[int, Path] = {}

    def __call__(self, index: int) -> Path:
        if index not in self._made:
            clone = make_clone(
                self.root, self.base / f"worker-{index}" / "modelgraft", from_worktree=self.from_worktree
            )
            check_imports(clone)
            self._made[index] = clone
        return self._made[index]


def write_json(path: Path, results: Sequence[ModelResult], meta: dict) -> None:
    payload = {
        **meta,
        "summary": summarize(results),
        "results": [asdict(r) | {"slots": list(r.slots)} for r in results],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def _interrupt_on_sigterm():  # -> the previous handler, or None when not in the main thread
    """A SIGTERM ends the survey as Ctrl-C does: its processes killed, its clones removed."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, interrupt)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``scaffold-survey`` console script under the shared exit-status handler: a bug exits 3, not 1."""
    # Imported here: importing this module (as the survey's workers do) must not load the generator.
    from modelgraft.generator.entrypoint import run_script

    return run_script("scaffold-survey", lambda: _survey(argv))


def _survey(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code not in (0, None) else EXIT_OK
    tty = sys.stderr.isatty()
    base: Path | None = None
    runner = Runner()
    started = time.monotonic()
    previous_sigterm = _interrupt_on_sigterm()
    try:
        _validate(args)
        root = repository_root(Path.cwd())
        models_dir = transformers_models_dir()
        upstream = causal_lm_models(models_dir)
        base = Path(tempfile.mkdtemp(prefix="scaffold-survey-"))
        factory = _CloneFactory(root, base, from_worktree=args.from_worktree)
        print(f"scaffold-survey: cloning {root} into {base} ...", file=sys.stderr, flush=True)
        first = factory(0)
        names = select(upstream, zoo_models(first), args.models)
        categorized = read_categories(first, names, models_dir)
        if categorized.warning:
            print(f"scaffold-survey: warning: {categorized.warning}", file=sys.stderr)
        if args.category:
            names = [n for n in names if categorized.by_model[n][0] == args.category]
        if args.limit is not None:
            names = names[: args.limit]
        if not names:
            raise SurveyError("no model to survey (check the model names, --category and --limit)")
        jobs = min(args.jobs, len(names))
        threads = max(1, (os.cpu_count() or 1) // jobs)
        settings = Settings(args.timeout, args.vcs_ref, args.pass_category, threads)
        print(
            f"scaffold-survey: {len(names)} model(s) of transformers {transformers_version()}, "
            f"{jobs} worker(s), {args.timeout:g} s each at most",
            file=sys.stderr,
            flush=True,
        )
        with Display(len(names), tty=tty) as display:
            results = run_survey(factory, jobs, names, categorized.by_model, settings, display, runner)
    except SurveyError as error:
        print(f"scaffold-survey: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("scaffold-survey: interrupted", file=sys.stderr)
        return 130
    finally:
        if base is not None:
            if args.keep:
                print(f"scaffold-survey: clones kept in {base}", file=sys.stderr)
            else:
                shutil.rmtree(base, ignore_errors=True)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)

    elapsed = time.monotonic() - started
    if args.markdown:
        caption = (
            f"`scaffold-survey` on transformers {transformers_version()}, {time.strftime('%Y-%m-%d')}: "
            f"{len(results)} model(s)" + (f" ({categorized.warning})" if categorized.warning else "")
        )
        sys.stdout.write(markdown_tables(results, caption=caption))
    elif sys.stdout.isatty():
        from rich.console import Console

        Console().print(rich_summary(results))
        failures = [r for r in results if r.outcome != PASS]
        if failures:
            sys.stdout.write("\n" + plain_tables(results).split("\n\n", 1)[1])
    else:
        sys.stdout.write(plain_tables(results))
    if categorized.warning:
        print(f"scaffold-survey: warning: {categorized.warning}", file=sys.stderr)
    print(f"{len(results)} model(s) in {elapsed:.0f} s", file=sys.stderr)
    if args.json is not None:
        meta = {
            "transformers": transformers_version(),
            "source": str(root),
            "from_worktree": args.from_worktree,
            "reader": categorized.reader,
            "categories_warning": categorized.warning,
            "jobs": jobs,
            "timeout": args.timeout,
            "seconds": round(elapsed, 1),
        }
        write_json(args.json, results, meta)
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
