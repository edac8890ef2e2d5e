"""How every console script of the project ends: one exit-status table, one error line, or a traceback.

``patchgen``, ``generate-all``, ``patchgen-pin``, ``patchgen-inspect``, ``scaffold-update``,
``scaffold-conflicts`` and ``scaffold-survey`` all run their work through :func:`run_script`, so a
CI log or a pre-commit hook reads their status the same way:

====  ====================================================================================
0     ok
1     the tool worked and found something to fix: drift (``patchgen --check``,
      ``patchgen-pin survey``, ``scaffold-update --check``) or a conflict (``scaffold-update``,
      ``scaffold-conflicts``), or models that fail (``scaffold-survey``)
2     bad input: one line naming the file, the target and the cause; nothing was changed
      (argparse's usage errors exit 2 as well); or a tool the script needs is not installed: one
      line naming the extra that installs it
3     an internal error: a bug, never the user's input; the traceback is printed
====  ====================================================================================

Kept apart from each tool so that no tool can let a bug fall through to Python's status 1, which
would read as drift or a conflict.

The console scripts' entry points are the functions at the end of this module (:func:`launch`). Every
script needs the ``tools`` extra (README, "Installation layers"), which the base install leaves out:
where a module of it is missing, the script ends like any bad input, in one line that names the extra,
with status 2, before it imports its tool. This module itself imports nothing outside the standard
library and the base install.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Sequence
from enum import IntEnum

from modelgraft.generator.errors import CollectedErrors, PatchgenError, UserError

#: The extra that installs the generator's and the scaffolder's tools.
TOOLS_EXTRA = "tools"
#: What the tools extra installs, by the top-level module each is imported as
#: (tests/engine/test_dependencies.py keeps this equal to the extra in pyproject.toml).
TOOLS_MODULES = frozenset({"copier", "jinja2", "plumbum", "rich", "ruff", "yaml"})
#: How to install the tools extra, from the package index or from a checkout.
_TOOLS_ADVICE = (
    f"modelgraft's {TOOLS_EXTRA} extra: pip install 'modelgraft[{TOOLS_EXTRA}]'"
    f" (in a checkout: pip install -e '.[{TOOLS_EXTRA}]')"
)
#: Each console script and the function that does its work, imported when the script starts.
SCRIPTS = {
    "patchgen": "modelgraft.generator.cli:main",
    "generate-all": "modelgraft.generator.cli:generate_all",
    "patchgen-pin": "modelgraft.generator.pinbump.cli:main",
    "patchgen-inspect": "modelgraft.generator.inspect_cli:main",
    "scaffold-update": "modelgraft.scaffold.update:main",
    "scaffold-conflicts": "modelgraft.scaffold.conflict_check:main",
    "scaffold-survey": "modelgraft.scaffold.survey:main",
}


class ExitStatus(IntEnum):
    """The one exit-status table of every console script."""

    OK = 0
    #: Drift or a conflict: the run worked and found something to fix.
    FINDINGS = 1
    BAD_INPUT = 2
    INTERNAL = 3


def run_script(prog: str, work: Callable[[], int]) -> int:
    """Run ``work`` (which returns 0 or 1) and map whatever it raises onto :class:`ExitStatus`.

    A :class:`UserError` is printed as ``<prog>: error: <message>`` and gives 2, and so is a module of the
    tools extra that is not installed (:func:`missing_tool`); any other exception is a bug: its
    traceback is printed and the status is 3. ``SystemExit`` (argparse's ``--help`` and usage errors)
    and ``KeyboardInterrupt`` pass through untouched.
    """
    try:
        status = work()
    except UserError as error:
        print(f"{prog}: error: {describe(error)}", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    except Exception as error:
        tool = missing_tool(error)
        if tool is not None:
            return _report_missing_tools(prog, [tool])
        traceback.print_exc()
        print(
            f"{prog}: internal error (the traceback above is a bug in {prog}, not in its input; please report it)",
            file=sys.stderr,
        )
        return ExitStatus.INTERNAL
    return int(status)


def missing_tools() -> list[str]:
    """The modules of the tools extra that cannot be found; none is imported."""
    return sorted(name for name in TOOLS_MODULES if importlib.util.find_spec(name) is None)


def missing_tool(error: BaseException) -> str | None:
    """The module of the tools extra whose absence ``error`` reports, or None for any other error."""
    if isinstance(error, ModuleNotFoundError) and error.name:
        top = error.name.partition(".")[0]
        if top in TOOLS_MODULES:
            return top
    return None


def _report_missing_tools(prog: str, modules: list[str]) -> int:
    """``<prog>: error: <modules> (is|are) not installed: <prog> needs modelgraft's tools extra: pip install ...``"""
    verb = "is" if len(modules) == 1 else "are"
    print(f"{prog}: error: {', '.join(modules)} {verb} not installed: {prog} needs {_TOOLS_ADVICE}", file=sys.stderr)
    return ExitStatus.BAD_INPUT


def describe(error: UserError) -> str:
    """The error's message; for a generator error, with its config's file relative to the project root."""
    if isinstance(error, CollectedErrors):
        return error.cause + "".join(f"\n  {describe(inner)}" for inner in error.errors)
    if isinstance(error, PatchgenError):
        return error.format(_config_file(error.config))
    return str(error)


def _config_file(module: str | None) -> str | None:
    """The file of config module ``module`` relative to the project root, where both can be found."""
    if not module:
        return None
    from modelgraft.generator.discovery import find_settings

    try:
        root = find_settings().root
    except PatchgenError:
        return None
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    return path.relative_to(root).as_posix() if path.is_file() else None


def launch(prog: str, argv: Sequence[str] | None = None) -> int:
    """Run console script ``prog``: import the module of its work (:data:`SCRIPTS`) and call it with ``argv``.

    Where the tools extra is missing (:func:`missing_tools`), that is one line and status 2, and nothing
    is imported. The import runs inside :func:`run_script`, so a module that fails to import for any
    other reason is a bug (3), never Python's status 1.
    """
    missing = missing_tools()
    if missing:
        return _report_missing_tools(prog, missing)
    module, _, function = SCRIPTS[prog].partition(":")
    return run_script(prog, lambda: getattr(importlib.import_module(module), function)(argv))


def _script(prog: str) -> Callable[..., int]:
    def main(argv: Sequence[str] | None = None) -> int:
        return launch(prog, argv)

    main.__name__ = main.__qualname__ = prog.replace("-", "_")
    main.__doc__ = f"The ``{prog}`` console script (``{SCRIPTS[prog]}``, through :func:`launch`)."
    return main


# The console scripts' entry points ([project.scripts] in pyproject.toml).
patchgen = _script("patchgen")
generate_all = _script("generate-all")
patchgen_pin = _script("patchgen-pin")
patchgen_inspect = _script("patchgen-inspect")
scaffold_update = _script("scaffold-update")
scaffold_conflicts = _script("scaffold-conflicts")
scaffold_survey = _script("scaffold-survey")
