"""Upstream models read once per test process, for the tests whose subject is what a reading says or what is made of
it (a fit, a recipe call), not the act of reading.

Reading a model parses its modeling, configuration and processing modules (0.15 to 0.35 s each, the composed VLMs
more, as they read their towers' packages too), and the fit and recipe tests read the same few models again and
again (llava eleven times in test_fit_composed_contract.py alone). A reading depends only on the pinned
transformers' sources, which no test changes, and :class:`ModelStructure` is a frozen dataclass, so one reading per
model and process is the same reading every test made for itself. Readings from other sources (``root`` or
``sources`` given, the toy packages some tests write) are not kept. test_reader.py's tests of reading itself (reading
twice gives equal reports, an unknown or empty package) call the reader directly.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from modelgraft.generator.upstream.reader import UpstreamSources
from modelgraft.generator.upstream.reader import read_model as _read_model
from modelgraft.generator.upstream.structure import ModelStructure

__all__ = ["read_model"]


@cache
def _pinned_reading(model: str) -> ModelStructure:
    return _read_model(model)


def read_model(model: str, *, root: Path | None = None, sources: UpstreamSources | None = None) -> ModelStructure:
    """``reader.read_model``, the pinned transformers' reading of ``model`` kept for the process (module docstring)."""
    if root is None and sources is None:
        return _pinned_reading(model)
    return _read_model(model, root=root, sources=sources)
