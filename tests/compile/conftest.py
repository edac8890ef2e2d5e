"""Every compile test starts from a clean dynamo cache, every slot eager, one torch thread and a fresh collector of
upstream's recorded outputs, and leaves them so."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from transformers.utils import output_capturing

from modelgraft.models.testing.parity import eager_slots_on_one_thread


@pytest.fixture(autouse=True)
def _fresh_dynamo_and_eager_slots() -> Iterator[None]:
    """Compiled code is cached per code object with guards: a test must neither reuse nor leave any."""
    torch._dynamo.reset()
    with eager_slots_on_one_thread():
        yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True)
def _upstreams_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """``compile_layers`` replaces upstream's collector process-wide: a test that checks upstream's own hooks must
    not find the replacement an earlier test of its worker left."""
    monkeypatch.setattr(output_capturing, "_active_collector", output_capturing.CompileableContextVar("collector"))


@pytest.fixture
def inductor_in_process() -> Iterator[None]:
    """Inductor compiles its C++ in this process: starting its pool of compile workers costs about 17 s on two
    cores, more than the C++ of the inductor tests takes (docs/compile.md, "Running the tests")."""
    from torch._inductor import config

    with config.patch(compile_threads=1):
        yield
