"""Auxiliary-loss-free expert balancing: the correction-bias update that DeepSeek-style routers train with.

DeepSeek-V3, GLM-MoE-DSA and DeepSeek-V4's score-routed layers choose experts by ``score +
e_score_correction_bias``, but weight them by the unbiased score. The bias is a buffer: no gradient
reaches it, and upstream transformers computes the routing without ever changing it. In training it
moves after every step, by a fixed rate, against the load each expert received: up for an expert that
got fewer tokens than the mean, down for one that got more (DeepSeek-V3's technical report, section
2.1.2, "bias update speed"). These models output no ``router_logits`` and compute no auxiliary loss, so
without this update their routing is never balanced during training.

``ExpertBalancer(model)`` finds every such router (a module holding an ``e_score_correction_bias`` buffer
whose forward returns ``(logits, weights, indices)``, as all three upstream classes do), counts the
experts its forward passes select, and ``update(rate)`` applies the rule once per optimizer step::

    balancer = ExpertBalancer(model, group=data_group)  # None: one process, or the default group
    for batch in batches:
        model(**batch).loss.backward()
        optimizer.step()
        balancer.update(rate=1e-3)                      # counts summed over ``group`` first

Counts cover every routed token unless a forward runs inside ``balancer.real_tokens(mask)``, which
counts only the tokens a ``[batch, seq]`` mask marks real (padded fine-tuning batches; under sequence
parallelism, the rank's own slice of the mask, as ``shard_sequence`` returns it). Under data or
sequence parallelism every rank counts different tokens, so the counts are summed over ``group``
before the update and every rank moves its replica of the bias the same way. A token counted on several
ranks (replicated batches), or a forward recomputed by activation checkpointing, scales every count alike,
which leaves the update, a sign, unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Self

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import ProcessGroup

__all__ = ["ExpertBalancer", "biased_routers"]

BIAS = "e_score_correction_bias"


def biased_routers(model: nn.Module) -> dict[str, nn.Module]:
    """Every module of ``model`` that routes by a correction bias, by qualified name, in module order."""
    return {
        name: module for name, module in model.named_modules() if isinstance(module._buffers.get(BIAS), torch.Tensor)
    }


class ExpertBalancer:
    """Counts the experts each biased router selects, and moves its bias toward balance on ``update``."""

    def __init__(self, model: nn.Module, *, group: ProcessGroup | None = None) -> None:
        self.routers = biased_routers(model)
        if not self.routers:
            raise ValueError(
                f"{type(model).__name__} has no router with an {BIAS!r} buffer: its experts are balanced "
                "by an auxiliary loss (router_logits), not by a correction bias"
            )
        self.group = group
        self._mask: torch.Tensor | None = None
        self._counts = {
            name: torch.zeros_like(router._buffers[BIAS], dtype=torch.float64) for name, router in self.routers.items()
        }
        self._hooks = [router.register_forward_hook(self._counter(name)) for name, router in self.routers.items()]

    def _counter(self, name: str) -> Any:
        def count(module: nn.Module, args: Any, output: Any) -> None:
            indices = output[2]
            counts = self._counts[name]
            weights = None
            if self._mask is not None:
                if self._mask.numel() != indices.shape[0]:
                    raise ValueError(
                        f"{name}: the real-token mask of shape {tuple(self._mask.shape)} has {self._mask.numel()} "
                        f"entries, but the router routed {indices.shape[0]} tokens"
                    )
                weights = self._mask.reshape(-1, 1).expand(indices.shape).reshape(-1).to(counts.device, counts.dtype)
            flat = indices.reshape(-1).to(counts.device)
            counts += torch.bincount(flat, weights=weights, minlength=counts.numel()).to(counts.dtype)

        return count

    @contextmanager
    def real_tokens(self, mask: torch.Tensor | None) -> Iterator[None]:
        """Inside the block, count only the tokens ``mask`` (``[batch, seq]``, nonzero = real) marks real.

        The mask must cover exactly the tokens each router sees (a sequence-parallel rank's own slice);
        a router that routes another number of tokens raises ``ValueError``. ``None`` counts every token.
        """
        if mask is not None and mask.dim() != 2:
            raise ValueError(f"real-token mask: expected a [batch, seq] mask, got shape {tuple(mask.shape)}")
        previous, self._mask = self._mask, None if mask is None else mask.detach() != 0
        try:
            yield
        finally:
            self._mask = previous

    @property
    def counts(self) -> Mapping[str, torch.Tensor]:
        """Tokens each router sent to each expert since the last update, on this rank (float64, ``[E]``)."""
        return {name: counts.clone() for name, counts in self._counts.items()}

    @torch.no_grad()
    def update(self, rate: float) -> dict[str, torch.Tensor]:
        """Move every bias by ``rate`` toward balance, reset the counts, and return the loads used.

        ``bias += rate * sign(mean_load - load)``, with the loads summed over ``group`` (when
        ``torch.distributed`` is initialized), so every rank applies the same step.
        """
        if not rate > 0:
            raise ValueError(f"rate must be a positive number, got {rate!r}")
        names = list(self._counts)
        flat = torch.cat([self._counts[name] for name in names])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(flat, group=self.group)
        loads = flat.split([self._counts[name].numel() for name in names])
        for name, load in zip(names, loads, strict=True):
            bias = self.routers[name]._buffers[BIAS]
            step = torch.sign(load.mean() - load).to(bias.dtype) * rate
            bias.add_(step.to(bias.device))
            self._counts[name].zero_()
        return dict(zip(names, loads, strict=True))

    def remove(self) -> None:
        """Stop counting (removes the forward hooks); the biases keep their values."""
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
