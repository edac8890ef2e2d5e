"""Make a checkout's own folders the ``modelgraft`` package of a child process.

An installed modelgraft (editable or not) maps ``modelgraft.generator`` and ``modelgraft.models`` to one
checkout. The scaffold survey and the template tests work in throwaway clones, whose processes must run
the clone's generator and models, scaffolded models included. They put :func:`import_root` on
``PYTHONPATH``: a one-file ``modelgraft`` package there, whose ``__path__`` is the clone's root, is found
before the installed mapping. Nothing is added to this process's ``sys.path``.
"""

from __future__ import annotations

from pathlib import Path

#: Under the clone's git-ignored build/ folder, so a scaffold's clean-tree checks never see it.
IMPORT_ROOT = Path("build") / "import-root"


def import_root(checkout: Path) -> Path:
    """The folder to put on ``PYTHONPATH`` so that ``import modelgraft`` reads ``checkout``'s folders."""
    package = checkout / IMPORT_ROOT / "modelgraft"
    package.mkdir(parents=True, exist_ok=True)
    init = package / "__init__.py"
    text = (
        f'"""modelgraft, read from the checkout {checkout.resolve()}."""\n\n__path__ = [{str(checkout.resolve())!r}]\n'
    )
    if not init.is_file() or init.read_text(encoding="utf-8") != text:
        init.write_text(text, encoding="utf-8")
    return package.parent
