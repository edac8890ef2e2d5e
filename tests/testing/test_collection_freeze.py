"""The root ``conftest.py`` keeps what collection imported out of each test process's garbage collections."""

from __future__ import annotations

import gc


def test_what_collection_imported_is_frozen_before_the_tests_run() -> None:
    assert gc.get_freeze_count() > 0, gc.get_freeze_count()
