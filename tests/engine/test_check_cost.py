"""A warm ``patchgen --check`` on an unchanged tree stays cheap: it loads no engine and reads no upstream.

The check cache answers every config, so the check must not import the pipeline (planning, assembly),
the upstream reader, jinja2, ruff's runner or ``importlib.metadata`` (versions come from
``generator.installed``): docs/performance.md, "Generator".
"""

from __future__ import annotations

from .projects import Project
from .test_drift import zoo  # noqa: F401  (the fixture)

HEAVY = (
    "modelgraft.generator.pipeline",
    "modelgraft.generator.upstream.index",
    "jinja2",
    "subprocess",
    "importlib.metadata",
    "email",
)

SCRIPT = """
import contextlib, io, sys

from modelgraft.generator.cli import main

with contextlib.redirect_stdout(io.StringIO()):
    assert main(["--check"]) == 0
print(sorted(m for m in {heavy!r} if m in sys.modules))
"""


def test_a_warm_check_imports_no_engine_and_reads_no_upstream(zoo: Project) -> None:  # noqa: F811
    result = zoo.run_subprocess(code=SCRIPT.format(heavy=HEAVY))

    assert result.code == 0, result.err
    assert result.out.strip() == "[]"
