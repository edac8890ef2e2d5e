"""The root conftest.py puts the modules of the suite's longest tests first, so that no worker ends the run on one."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from conftest import pytest_collection_modifyitems  # the repository root is on the path: pytest's rootdir conftest


@dataclass
class _Item:
    nodeid: str
    heavy: bool = False

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return pytest.mark.heavy.mark if self.heavy and name == "heavy" else None


def test_a_module_with_a_heavy_test_moves_ahead_whole_and_in_order() -> None:
    items = [
        _Item("tests/a.py::one"),
        _Item("tests/b.py::light"),
        _Item("tests/b.py::long", heavy=True),
        _Item("tests/c.py::two"),
    ]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [item.nodeid for item in items] == [
        "tests/b.py::light",
        "tests/b.py::long",
        "tests/a.py::one",
        "tests/c.py::two",
    ]


def test_a_collection_without_heavy_tests_keeps_its_order() -> None:
    items = [_Item("tests/b.py::one"), _Item("tests/a.py::two")]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [item.nodeid for item in items] == ["tests/b.py::one", "tests/a.py::two"]
