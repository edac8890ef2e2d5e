"""The base of the parity suites whose tests bind kernels: each test starts with every slot eager, on one thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from modelgraft.models.testing.parity import eager_slots_on_one_thread

__all__ = ["SlotIsolatedSuite"]


class SlotIsolatedSuite:
    """A test binds what it needs; nothing it binds (or a slot left bound before it) reaches the next test."""

    @pytest.fixture(autouse=True)
    def _eager_slots(self) -> Iterator[None]:
        with eager_slots_on_one_thread():
            yield
