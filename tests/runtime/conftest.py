"""Fixtures shared by the runtime tests: clean slots around every test, throwaway model registrations."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from modelgraft.models.ops import OpsConfig, bound_ops
from modelgraft.models.testing import registered_model

#: An upstream model type the zoo does not ship, registered only for the length of a test.
THROWAWAY_MODEL_TYPE = "ministral"
UPSTREAM_MODELING = "transformers.models.ministral.modeling_ministral"
UPSTREAM_CONFIG = "transformers.MinistralConfig"
SLOT_GUARDED_MODULE = "modelgraft_runtime_tests_slot_guarded_ministral"


@pytest.fixture(autouse=True)
def _eager_slots() -> Iterator[None]:
    """Every test starts with all slots eager and cannot leak a binding into the next one."""
    with bound_ops(OpsConfig()):
        yield


@pytest.fixture
def upstream_as_generated() -> Iterator[str]:
    """A throwaway model type whose "generated" module is the upstream transformers module itself."""
    with registered_model(
        THROWAWAY_MODEL_TYPE, modeling={"gpu": UPSTREAM_MODELING}, config=UPSTREAM_CONFIG
    ) as model_type:
        yield model_type


@pytest.fixture
def slot_guarded_generated(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A throwaway model type whose generated module guards its loss with ``causal_lm_loss_slot``."""
    path = Path(__file__).with_name("slot_guarded_ministral.py")
    spec = importlib.util.spec_from_file_location(SLOT_GUARDED_MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, SLOT_GUARDED_MODULE, module)
    spec.loader.exec_module(module)
    with registered_model(
        THROWAWAY_MODEL_TYPE, modeling={"gpu": SLOT_GUARDED_MODULE}, config=UPSTREAM_CONFIG
    ) as model_type:
        yield model_type
