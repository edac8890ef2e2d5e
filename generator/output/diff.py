"""The reviewable ``.diff`` of a generated file against the upstream file it came from."""

from __future__ import annotations

import difflib


def unified_diff(upstream: str, generated: str, *, upstream_name: str, generated_name: str) -> str:
    """A timestamp-free unified diff, so it is as reproducible as the file itself."""
    lines = difflib.unified_diff(
        upstream.splitlines(keepends=True),
        generated.splitlines(keepends=True),
        fromfile=f"a/{upstream_name}",
        tofile=f"b/{generated_name}",
        n=3,
    )
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
