"""Template versions recorded before the ``modelgraft`` namespace name their Jinja extension ``scaffold.jinja_extension``.

``copier update`` renders the recorded version as well as the new one, so during an update the old name must
import, as the module installed now; afterwards it must not linger.
"""

from __future__ import annotations

import importlib
import sys

from modelgraft.scaffold import jinja_extension
from modelgraft.scaffold.update import _old_extension_names


def test_the_old_extension_name_imports_the_installed_extension_during_an_update() -> None:
    with _old_extension_names():
        old = importlib.import_module("scaffold.jinja_extension")

    assert old.ScaffoldExtension is jinja_extension.ScaffoldExtension


def test_the_old_names_are_gone_after_the_update() -> None:
    with _old_extension_names():
        pass

    assert "scaffold" not in sys.modules
    assert "scaffold.jinja_extension" not in sys.modules
