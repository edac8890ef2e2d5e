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
      (argparse's usage errors exit 2 as well)
3     an internal error: a bug, never the user's input; the traceback is printed
====  ====================================================================================

Kept apart from each tool so that no tool can let a bug fall through to Python's status 1, which
would read as drift or a conflict.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from enum import IntEnum

from modelgraft.generator.discovery import find_settings
from modelgraft.generator.errors import CollectedErrors, PatchgenError, UserError


class ExitStatus(IntEnum):
    """The one exit-status table of every console script."""

    OK = 0
    #: Drift or a conflict: the run worked and found something to fix.
    FINDINGS = 1
    BAD_INPUT = 2
    INTERNAL = 3


def run_script(prog: str, work: Callable[[], int]) -> int:
    """Run ``work`` (which returns 0 or 1) and map whatever it raises onto :class:`ExitStatus`.

    A :class:`UserError` is printed as ``<prog>: error: <message>`` and gives 2; any other exception is
    a bug: its traceback is printed and the status is 3. ``SystemExit`` (argparse's ``--help`` and usage
    errors) and ``KeyboardInterrupt`` pass through untouched.
    """
    try:
        status = work()
    except UserError as error:
        print(f"{prog}: error: {describe(error)}", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    except Exception:
        traceback.print_exc()
        print(
            f"{prog}: internal error (the traceback above is a bug in {prog}, not in its input; please report it)",
            file=sys.stderr,
        )
        return ExitStatus.INTERNAL
    return int(status)


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
    try:
        root = find_settings().root
    except PatchgenError:
        return None
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    return path.relative_to(root).as_posix() if path.is_file() else None
