"""The scaffold tools' bad input: a repository, scaffold or template version they cannot work with.

A :class:`~generator.errors.UserError`, so the shared console-script handler (``modelgraft.generator.entrypoint``)
prints it as one line and exits 2, and tells it from a bug (3) or a conflict (1).
"""

from __future__ import annotations

from modelgraft.generator.errors import UserError


class ScaffoldError(UserError):
    """Bad input, found before anything is changed (exit 2): the message names the directory and the cause."""
