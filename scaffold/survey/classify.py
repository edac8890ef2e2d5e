"""The pure half of ``scaffold-survey``: what one model's copy and tests produced, and what that means.

Nothing here runs a process or touches a repository: :func:`classify` turns an :class:`Observation` (the
exit codes and output of ``copier copy`` and ``pytest``, what the copy left on disk) into an outcome and its
reason, and :func:`guarded_slots` reads the slots a generated module guards. The tests feed both with fakes.

Outcomes:

- ``pass``: the copy succeeded and the model's own tests passed (at least one test ran and passed);
- ``refused``: the copy failed before writing anything (``models/<m>`` does not exist afterwards, nothing else
  changed) and neither Copier nor the generator crashed; the reason is the refusal's first meaningful lines;
- ``broken``: files left behind by a failed copy, a crash of Copier or the generator (a traceback, or the
  generator's exit code 3), or a timeout;
- ``wrong``: generated, but its own tests fail; the reason is the first failing test and its assertion line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

PASS, REFUSED, BROKEN, WRONG = "pass", "refused", "broken", "wrong"
OUTCOMES = (PASS, REFUSED, BROKEN, WRONG)

#: The generator's exit code for a bug in itself (docs/cli.md); 2 is a refusal (bad input, a failed check).
GENERATOR_CRASH = 3

#: How many lines of a refusal the reason keeps.
REASON_LINES = 6

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TASK_FAILED = re.compile(r"^Task '(.*)' returned non-zero exit status (-?\d+)\.?\s*$")
#: The copy's last task (scaffold/smoke.py): one forward and backward of the new model against upstream. Its
#: failure is a refusal (Copier removes the new directory), reported with a traceback by design.
_SMOKE_TASK = re.compile(r"-m modelgraft.scaffold\.smoke\b")
_SMOKE_MESSAGE = re.compile(r"^scaffold smoke check: ")
_TEMPLATE_VERSION = re.compile(r"^Copying from template version (\S+)")
#: Copier's report of one rendered path ("    create  tests/__init__.py").
_COPIER_FILE_OP = re.compile(r"^\s*(create|overwrite|identical|conflict|skip|delete|preserve)\s{2,}\S")
#: Lines of Copier's chatter that say nothing about why a copy failed.
_NOISE = (
    re.compile(r"^No git tags found in template"),
    _TEMPLATE_VERSION,
    re.compile(r"^\s*> Running task \d+ of \d+"),
    _TASK_FAILED,
    re.compile(r"DirtyLocalWarning"),
    re.compile(r"^\s*warn\(|^\s*warnings\.warn\("),
    re.compile(r"^Dirty template changes included automatically"),
)
#: A ValueError Copier raises for an answer its questionnaire rejects (a validator, a disabled choice): a
#: refusal, even though the ``copier`` CLI prints it with a traceback.
_QUESTION_REJECTED = re.compile(r"^ValueError: (Validation error for question|Invalid choice for) ")
#: The line that ends a traceback: the exception's (dotted) class name and its message.
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::\s.*|:?)$")


#: The order slots are listed in (the op slots of models/ops/slots.py); others follow in order of appearance.
SLOT_ORDER = (
    "rms_norm",
    "layer_norm",
    "glu_activation",
    "rope",
    # a Gated DeltaNet mixer: its gated norm, whole and decode-step conv (a short convolution's two slots),
    # chunked and recurrent delta rule
    "rms_norm_gated",
    "causal_conv1d",
    "causal_conv1d_update",
    "chunk_gated_delta_rule",
    "recurrent_gated_delta_rule",
    "moe_experts",
    "load_balancing_loss",
    "causal_lm_loss",
    "sequence_classification_loss",
)


@dataclass(frozen=True)
class StepResult:
    """One process the survey ran: ``copier copy`` or ``pytest``."""

    argv: tuple[str, ...]
    returncode: int | None  # None when it timed out
    output: str  # stdout and stderr, interleaved as the process wrote them
    seconds: float = 0.0
    timed_out: bool = False


@dataclass(frozen=True)
class Observation:
    """What copying one model and running its tests left behind, in the survey's temporary clone."""

    model: str
    copy: StepResult
    #: ``models/<m>`` exists after the copy.
    dest_exists: bool
    #: Paths outside ``models/<m>`` that the copy created or changed (``git status`` of the clone).
    stray: tuple[str, ...] = ()
    #: The tests, when the copy succeeded; None otherwise.
    tests: StepResult | None = None
    #: The total time allowed to the model, for a timeout's reason.
    timeout: float | None = None
    #: The slots the generated GPU modeling guards (:func:`guarded_slots`); empty when nothing was generated.
    slots: tuple[str, ...] = ()
    #: For a refusal naming the text answer that scaffolds the package's causal LM alone (:func:`text_answer_of`):
    #: that answer and the copy made with it.
    text: tuple[str, Observation] | None = None


@dataclass(frozen=True)
class Verdict:
    """An outcome and its reason."""

    outcome: str  # one of OUTCOMES
    reason: str = ""  # may hold several lines; the first is the headline


@dataclass(frozen=True)
class TextAnswerResult:
    """A refused model's text model, copied with the category answer its refusal names (llama4 as moe)."""

    category: str
    outcome: str
    reason: str = ""
    slots: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for a table: ``-d category=moe: pass (rms_norm, ...)``, or the outcome and its reason."""
        what = f"-d category={self.category}: {self.outcome}"
        if self.outcome == PASS:
            return f"{what} ({', '.join(self.slots)})" if self.slots else what
        return f"{what}: {headline(self.reason)}" if self.reason else what


@dataclass
class ModelResult:
    """One model's row of the survey."""

    model: str
    category: str
    category_reason: str = ""
    outcome: str = ""
    reason: str = ""
    slots: tuple[str, ...] = ()
    seconds: float = 0.0
    template_version: str | None = None
    details: dict = field(default_factory=dict)
    #: For a refused model whose refusal names a text answer: that copy's outcome (not counted in the summary).
    text_answer: TextAnswerResult | None = None

    @property
    def headline(self) -> str:
        return headline(self.reason)


#: The last line of a refusal whose package's causal LM is a text model of its own that fits a text category
#: (the fit's ``Fit.refusal_message``): the answer that scaffolds it alone.
_TEXT_ANSWER = re.compile(r"builds no tower: -d category=(\w+) scaffolds that text model alone")


def text_answer_of(copy_output: str) -> str | None:
    """The category answer a refusal names for the package's text model alone (``moe`` for llama4), else None."""
    found = _TEXT_ANSWER.search(strip_ansi(copy_output))
    return found.group(1) if found else None


def strip_ansi(text: str) -> str:
    """The text without terminal colour codes (Copier and pytest colour their output)."""
    return _ANSI.sub("", text).replace("\r\n", "\n")


def headline(reason: str, width: int | None = None) -> str:
    """A reason in one line, for tables: its first line, with a count of the lines left out.

    A summary line followed by a list ("no scaffold for bart: ..." then "  - category: ...") is shown as its
    first list item, which names the structure; cut to ``width`` characters.
    """
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    if not lines:
        return ""
    items = [line[2:].strip() for line in lines[1:] if line.startswith("- ")]
    if items:
        text = items[0] + (f" (+{len(items) - 1} more)" if len(items) > 1 else "")
    else:
        text = lines[0] + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else "")
    if width is not None and len(text) > width:
        text = text[: width - 1].rstrip() + "…"
    return text


def template_version(copy_output: str) -> str | None:
    """The template version Copier says it copied from ("Copying from template version 0.1.0")."""
    for line in strip_ansi(copy_output).splitlines():
        match = _TEMPLATE_VERSION.match(line.strip())
        if match:
            return match.group(1)
    return None


def failed_task(copy_output: str) -> tuple[str, int] | None:
    """The command and exit status of the Copier task that failed (the generator, the smoke check), if one did."""
    for line in strip_ansi(copy_output).splitlines():
        match = _TASK_FAILED.match(line.strip())
        if match:
            return match.group(1), int(match.group(2))
    return None


def _tracebacks(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line ranges of the Python tracebacks in ``lines``: ``Traceback`` to its exception line."""
    found = []
    index = 0
    while index < len(lines):
        if lines[index].startswith("Traceback (most recent call last)"):
            end = index + 1
            while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
                end += 1
            found.append((index, min(end, len(lines) - 1)))
            index = end + 1
        else:
            index += 1
    return found


def exception_of(output: str) -> str | None:
    """The exception line (and the message lines after it) of the last traceback in ``output``, if any."""
    lines = strip_ansi(output).splitlines()
    blocks = _tracebacks(lines)
    if not blocks:
        return None
    _, end = blocks[-1]
    message = [lines[end].rstrip()]
    # A multi-line message continues until a blank line or the next traceback.
    for line in lines[end + 1 :]:
        if not line.strip() or line.startswith("Traceback ") or _EXCEPTION_LINE.match(line):
            break
        if _TASK_FAILED.match(line.strip()) or any(pattern.search(line) for pattern in _NOISE):
            break
        message.append(line.rstrip())
    return "\n".join(message)


def refusal_reason(copy_output: str, limit: int = REASON_LINES) -> str:
    """The first meaningful lines of a refused copy: Copier's file list, task chatter and tracebacks dropped."""
    lines = strip_ansi(copy_output).splitlines()
    skip = set()
    for start, end in _tracebacks(lines):
        skip.update(range(start, end))  # keep the exception line itself
    kept = []
    for number, line in enumerate(lines):
        if number in skip or not line.strip():
            continue
        if _COPIER_FILE_OP.match(line) or any(pattern.search(line) for pattern in _NOISE):
            continue
        text = line.rstrip()
        # A questionnaire refusal: the message only (Copier's "Invalid choice for 'category': ..." stays).
        text = re.sub(r"^ValueError: (Validation error for question '\w+': )?(?=.)", "", text)
        kept.append(text)
        if len(kept) == limit:
            break
    return "\n".join(kept) or "the copy failed without a message"


def smoke_reason(copy_output: str, exception: str | None) -> str:
    """A failed smoke check: its own message first ("scaffold smoke check: ... does not match upstream ...")."""
    lines = [line.strip() for line in strip_ansi(copy_output).splitlines() if _SMOKE_MESSAGE.match(line.strip())]
    if exception:
        lines.append(exception.splitlines()[0])
    return "\n".join(lines) or refusal_reason(copy_output)


def _pytest_summary_count(output: str, word: str) -> int:
    """How many tests pytest's final line says were ``word`` ("passed", "failed", ...)."""
    counts = re.findall(rf"(\d+) {word}\b", output)
    return int(counts[-1]) if counts else 0


def failing_test(output: str) -> str:
    """The first failing test of a pytest run and its assertion line ("nodeid: E   assert ...")."""
    text = strip_ansi(output)
    lines = text.splitlines()
    nodeid = None
    summary_message = None
    for line in lines:
        match = re.match(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$", line.strip())
        if match:
            nodeid = match.group(2)
            summary_message = match.group(3)
            if match.group(1) == "ERROR" and nodeid.endswith(".py"):
                nodeid = f"collecting {nodeid}"
            break
    assertion = None
    for line in lines:
        if line.startswith("E ") and line[1:].strip():
            assertion = line[1:].strip()
            break
    if nodeid is None:
        for line in lines:  # without the short summary (no -ra): "____ TestX.test_y[gpu] ____"
            match = re.match(r"^_+ (.+?) _+$", line.strip())
            if match:
                nodeid = match.group(1)
                break
    message = assertion or summary_message
    if nodeid and message:
        return f"{nodeid}: {message}"
    if nodeid or message:
        return nodeid or message or ""
    tail = [line.strip() for line in lines if line.strip()]
    return tail[-1] if tail else "pytest failed without output"


def classify(observation: Observation) -> Verdict:
    """Pass, refused, broken or wrong, with the reason (see the module docstring)."""
    copy = observation.copy
    rel = f"models/{observation.model}"
    limit = f" after {observation.timeout:g} s" if observation.timeout is not None else ""

    if copy.timed_out:
        return Verdict(BROKEN, f"timeout{limit}: the copy (copier copy and the generator) did not finish")

    if copy.returncode is not None and copy.returncode < 0:
        return Verdict(BROKEN, f"copier was killed by signal {-copy.returncode}")
    if copy.returncode != 0:
        task = failed_task(copy.output)
        command, status = task if task else ("", None)
        smoke = bool(_SMOKE_TASK.search(command))
        exception = exception_of(copy.output)
        if status == GENERATOR_CRASH and not smoke:
            return Verdict(BROKEN, "the generator crashed (exit 3)" + (f": {exception}" if exception else ""))
        if status is not None and status < 0:
            return Verdict(BROKEN, f"a task of the copy was killed by signal {-status}: {command}")
        if exception and not smoke and not _QUESTION_REJECTED.match(exception):
            where = "a task of the copy" if task else "copier"
            return Verdict(BROKEN, f"{where} crashed: {exception}")
        left = ([rel] if observation.dest_exists else []) + list(observation.stray)
        if left:
            return Verdict(
                BROKEN,
                "files left behind after a failed copy: " + ", ".join(left) + "\n" + refusal_reason(copy.output),
            )
        if smoke:
            return Verdict(REFUSED, smoke_reason(copy.output, exception))
        return Verdict(REFUSED, refusal_reason(copy.output))

    if not observation.dest_exists:
        return Verdict(BROKEN, f"the copy exited 0 but {rel} does not exist")
    if observation.stray:
        return Verdict(BROKEN, "the copy wrote outside " + rel + ": " + ", ".join(observation.stray))

    tests = observation.tests
    if tests is None:
        return Verdict(BROKEN, "the tests did not run")
    if tests.timed_out:
        return Verdict(BROKEN, f"timeout{limit}: the tests of {rel} did not finish")
    code = tests.returncode
    if code == 0:
        if _pytest_summary_count(strip_ansi(tests.output), "passed") == 0:
            return Verdict(WRONG, "no test passed (every test was skipped or deselected)")
        return Verdict(PASS, thin_scaffold_note(observation.slots))
    if code == 5:
        return Verdict(WRONG, f"no tests collected in {rel}")
    if code in (1, 2):  # tests failed; or interrupted, which -x does after a collection error
        return Verdict(WRONG, failing_test(tests.output))
    exception = exception_of(tests.output)
    return Verdict(BROKEN, f"pytest exited {code}" + (f": {exception}" if exception else ""))


#: Loss heads: a scaffold guards the causal LM's, and "two slots" besides are counted without them
#: (docs/scaffolding.md, "Refusals").
LOSS_SLOTS = ("causal_lm_loss", "sequence_classification_loss", "load_balancing_loss")


def thin_scaffold_note(slots: tuple[str, ...]) -> str:
    """For a passing model: a note when its scaffold guards less than the causal LM loss and two other slots.

    Such a scaffold counts as refused (docs/scaffolding.md, "Refusals": it would guard too little); the survey
    keeps the outcome it observed, ``pass``, and says so in the reason.
    """
    others = [slot for slot in slots if slot not in LOSS_SLOTS]
    if "causal_lm_loss" in slots and len(others) >= 2:
        return ""
    guarded = ", ".join(slots) or "no slot"
    return f"thin scaffold: guards only {guarded} (less than the causal LM loss and two slots)"


def merged_slots(*groups: tuple[str, ...]) -> tuple[str, ...]:
    """The slots of every group, once each, in :data:`SLOT_ORDER` (unknown names after, as first seen)."""
    names = list(dict.fromkeys(name for group in groups for name in group))
    known = [name for name in SLOT_ORDER if name in names]
    return (*known, *(name for name in names if name not in SLOT_ORDER))


def guarded_slots(source: str) -> tuple[str, ...]:
    """Slot names whose ``<name>_slot.use_non_eager_impl`` the generated module consults (:data:`SLOT_ORDER`)."""
    names: list[str] = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        found = re.findall(r"\b(\w+)_slot\.use_non_eager_impl\b", source)
    else:
        nodes = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr == "use_non_eager_impl"
            and isinstance(node.value, ast.Name)
            and node.value.id.endswith("_slot")
        ]
        nodes.sort(key=lambda node: (node.lineno, node.col_offset))
        found = [node.value.id[: -len("_slot")] for node in nodes]  # type: ignore[attr-defined]
    for name in found:
        if name and name not in names:
            names.append(name)
    known = [name for name in SLOT_ORDER if name in names]
    return (*known, *(name for name in names if name not in SLOT_ORDER))
