"""No two configs of a run generate the same code; a backend gets a config only when its code differs.

Backends are kernel families bound to op slots at run time (docs/design.md, "Run time: registry, loader,
op slots"), so one generated module serves every backend of a model. A sibling config that only
``inherit_from``s another writes a second file equal to the first except for its header: twice the
review, the drift and the import cost for nothing. The check compares what each config's code makes,
the output below the header, which is the part that could differ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from modelgraft.generator.errors import DuplicateOutputError
from modelgraft.generator.output.header import below_header

__all__ = ["check_distinct_outputs"]


def check_distinct_outputs(outputs: Mapping[str, tuple[str, str]]) -> None:
    """Raise for the first config whose output equals another config's below the header.

    ``outputs`` maps each config of the run (by module name) to its target file and the text its output
    holds: as generated now, or as on disk where the check cache vouches for it. Of two equal outputs,
    the config whose name sorts later (``..._npu_...`` after ``..._gpu_...``) is the one refused.
    """
    first_with: dict[str, str] = {}
    for name in sorted(outputs):
        target, text = outputs[name]
        digest = hashlib.sha256(below_header(text).encode("utf-8")).hexdigest()
        other = first_with.setdefault(digest, name)
        if other == name:
            continue
        raise DuplicateOutputError(
            f"generates the same code as {other} (the two outputs differ in their header only); a backend "
            f"whose code does not differ needs no config: delete {name} and its generated file, and let "
            f'{other}\'s module serve that backend (docs/adding-a-model.md, "Phase 1: scope")',
            config=name,
            target=target,
        )
