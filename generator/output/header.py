"""The do-not-edit header of a generated file, with a fingerprint of every input byte."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # below_header serves a check that loads no config
    from modelgraft.generator.dsl.config import PatchConfig

# Bump when the output layout changes in a way the inputs cannot show.
FORMAT_VERSION = "2"

#: The first and the last line of every header.
RULE = "# " + "=" * 100
_SOURCE = "# Source: "


def fingerprint(
    *,
    upstream_version: str,
    source_module: str,
    upstream_bytes: bytes,
    files: Iterable[tuple[str, bytes]],
    ruff_version: str,
) -> str:
    """Stable digest of the inputs: same inputs, same header, on any machine."""
    digest = hashlib.sha256()
    for part in (FORMAT_VERSION, upstream_version, source_module, ruff_version):
        digest.update(part.encode() + b"\0")
    digest.update(hashlib.sha256(upstream_bytes).digest())
    for name, data in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:20]


def render_header(
    config: PatchConfig, *, config_name: str, upstream_version: str, fingerprint: str, regenerate: str
) -> str:
    top = config.source_module.split(".")[0]
    lines = [
        RULE,
        "# GENERATED FILE - DO NOT EDIT BY HAND.",
        f"# Regenerate with: {regenerate}",
        f"{_SOURCE}{config.source_module} ({top}=={upstream_version})",
        f"# Config: {config_name}",
    ]
    if config.description:
        lines.append(f"# Description: {config.description}")
    lines.append(f"# Fingerprint: {fingerprint}")
    if config.patches:
        lines.append("# Patches:")
        lines += [
            f"#   - {p.kind} {p.target}" + (f": {p.description}" if p.description else "") for p in config.patches
        ]
    if config.exclusions:
        lines.append(f"# Excluded: {', '.join(config.exclusions)}")
    lines.append(RULE)
    return "\n".join(lines) + "\n"


def generated_from(text: str) -> str | None:
    """The ``<package>==<version>`` that the header of a generated file names as its source, or None."""
    for line in text.splitlines()[1:]:
        if line == RULE:
            break
        if line.startswith(_SOURCE) and line.endswith(")") and "==" in line:
            return line.rpartition("(")[2][:-1]
    return None


def below_header(text: str) -> str:
    """``text`` without the header :func:`render_header` wrote at its top: what the config's code made.

    The header is the lines from the first rule to the next one; a text that does not start with a
    rule has no header and is returned whole.
    """
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n") != RULE:
        return text
    for row, line in enumerate(lines[1:], start=1):
        if line.rstrip("\r\n") == RULE:
            return "".join(lines[row + 1 :])
    return text


def relative_name(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name
