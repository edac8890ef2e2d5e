"""The collector is paused while a batch is generated, and left as it was found afterwards."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

import pytest

from modelgraft.generator.gc_pause import paused_gc


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


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


def run_in_fresh_interpreter(code: str) -> None:
    """Run ``code`` where nothing is frozen yet: the test process froze what its collection imported."""
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, timeout=60)


def test_what_the_pause_left_alive_is_in_the_oldest_generation_where_nothing_was_frozen() -> None:
    run_in_fresh_interpreter(
        """
        import gc
        from modelgraft.generator.gc_pause import paused_gc

        assert gc.isenabled() and gc.get_freeze_count() == 0
        with paused_gc():
            survivor = [[]]
        assert not any(obj is survivor for obj in gc.get_objects(generation=0))
        assert any(obj is survivor for obj in gc.get_objects(generation=2))
        assert gc.get_freeze_count() == 0
        """
    )


def test_a_freeze_made_before_the_pause_outlasts_it() -> None:
    run_in_fresh_interpreter(
        """
        import gc
        from modelgraft.generator.gc_pause import paused_gc

        frozen = [[]]
        gc.freeze()
        count = gc.get_freeze_count()
        with paused_gc():
            survivor = [[]]
        assert gc.isenabled()
        assert gc.get_freeze_count() == count, (gc.get_freeze_count(), count)
        assert not any(obj is frozen for generation in range(3) for obj in gc.get_objects(generation=generation))
        """
    )


def test_cyclic_garbage_made_in_the_pause_is_still_collected(collector_on) -> None:
    class Node:
        pass

    with paused_gc():
        node = Node()
        node.cycle = node
        gone = weakref.ref(node)
        del node

    gc.collect()
    assert gone() is None
