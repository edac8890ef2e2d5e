"""Upstream's side of a parity run, kept per process for the runs that repeat it exactly.

A model's suite compares the generated model with upstream many times on the same inputs: one run per
slot with its reference kernel bound, one per eager batch check, each in fp32 and bf16. Upstream's side
(its weights from the seed and its training step on the batch) does not depend on what the generated
side binds, so it is computed once per inputs and reused: each run still builds the generated model
from upstream's weights and runs its own step.

The key holds everything upstream's step depends on: the class, the whole config (pickled, so private
settings such as the attention implementation count), the batch's bytes, the seed, dtype and device, and
torch's process-wide settings that change numerics (threads, default dtype, deterministic algorithms,
grad mode, autocast). Inputs that differ in anything give another key; an equal key is the same
computation, and CPU steps are bitwise reproducible, which the bitwise-logits check relies on already.
"""

from __future__ import annotations

import hashlib
import pickle
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import torch
from transformers import PreTrainedConfig, PreTrainedModel

#: Entries kept; a suite's runs of one model and dtype come together, so a few suffice.
KEPT = 8


class UpstreamSteps:
    """A bounded map from a parity run's inputs to upstream's weights and step result (least recent out)."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._entries: OrderedDict[str, tuple[dict[str, torch.Tensor], Any]] = OrderedDict()

    def get_or_compute(
        self, key: str | None, compute: Callable[[], tuple[dict[str, torch.Tensor], Any]]
    ) -> tuple[dict[str, torch.Tensor], Any, bool]:
        """``(weights, step, computed)``: the kept entry of ``key``, or ``compute()``'s, then kept (never for
        ``key`` None: inputs :func:`step_key` cannot describe)."""
        if key is None:
            weights, step = compute()
            return weights, step, True
        if key in self._entries:
            self._entries.move_to_end(key)
            weights, step = self._entries[key]
            return weights, step, False
        weights, step = compute()
        self._entries[key] = (weights, step)
        while len(self._entries) > self.kept:
            self._entries.popitem(last=False)
        return weights, step, True

    def clear(self) -> None:
        self._entries.clear()


def _feed(digest: Any, value: Any) -> None:
    """Hash ``value`` by content: tensors by dtype, shape and bytes; containers by their items; the rest by repr."""
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous()
        digest.update(f"tensor {data.dtype} {tuple(data.shape)}".encode())
        digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    elif isinstance(value, Mapping):
        digest.update(f"mapping {len(value)}".encode())
        for key in sorted(value, key=repr):
            digest.update(repr(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__} {len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(repr(value).encode())


def step_key(
    upstream_cls: type[PreTrainedModel],
    config: PreTrainedConfig,
    batch: Mapping[str, Any],
    *,
    seed: int,
    dtype: torch.dtype,
    device: str | torch.device,
) -> str | None:
    """The digest of everything upstream's weights and step depend on (module docstring); None for a config
    that does not pickle, whose run is then computed as if it were the first."""
    digest = hashlib.sha256()
    settings = (
        f"{upstream_cls.__module__}.{upstream_cls.__qualname__}",
        id(upstream_cls),
        seed,
        dtype,
        str(torch.device(device)),
        torch.get_num_threads(),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_grad_enabled(),
        torch.is_autocast_enabled("cpu"),
    )
    digest.update(repr(settings).encode())
    try:
        digest.update(pickle.dumps(config))
    except (pickle.PicklingError, TypeError, AttributeError):
        return None
    _feed(digest, batch)
    return digest.hexdigest()


#: This process's upstream steps (check_parity).
UPSTREAM_STEPS = UpstreamSteps()
