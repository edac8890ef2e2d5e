"""The collector is paused while a batch is generated, and left as it was found afterwards."""

from __future__ import annotations

import gc

import pytest

from modelgraft.generator.gc_pause import paused_gc


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_inside_and_as_before_after(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.raises(RuntimeError), paused_gc():
            assert not gc.isenabled()
            raise RuntimeError("a failing config")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
