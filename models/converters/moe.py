"""Per-expert MoE checkpoints -> the fused expert tensors of transformers 5.x modeling.

Checkpoints on the hub (Qwen3-MoE, Qwen2-MoE, ...) store one ``nn.Linear`` per expert::

    model.layers.3.mlp.experts.17.gate_proj.weight   [I, H]
    model.layers.3.mlp.experts.17.up_proj.weight     [I, H]
    model.layers.3.mlp.experts.17.down_proj.weight   [H, I]

while the modeling holds one parameter per projection for all E experts of a layer::

    model.layers.3.mlp.experts.gate_up_proj          [E, 2I, H]   (per expert: gate rows, then up rows)
    model.layers.3.mlp.experts.down_proj             [E, H, I]

which is what transformers' own loading does for these models (``conversion_mapping.py``, "qwen2_moe":
``MergeModulelist(dim=0)`` then ``Concatenate(dim=1)``). :class:`FusedExpertsConverter` buffers the
per-expert pieces of a layer and emits a fused tensor as soon as all E experts of it arrived, so at
most one layer's experts are held at a time. Already-fused keys pass through; fused tensors stored
transposed (``[E, H, 2I]`` / ``[E, I, H]``, the layout some exporters and VL-MoE checkpoints use) and
transposed per-expert pieces are transposed back. Which way round a tensor is stored is never read off
its shape alone (``modelgraft.models.converters.layout``): the shapes the config's sizes give tell the two apart
unless ``H == 2I`` (gate_up) or ``H == I`` (down, per-expert pieces); such a tensor takes the declared
``layout``, or, undeclared, the layout the checkpoint's other expert tensors show (a fused tensor waits
for one; ``finalize`` raises if none did). Per-expert pieces that nothing settles are ``nn.Linear``
weights, ``[out, in]``, by the definition of that format.

Under expert parallelism a rank holds only experts ``[start, stop)`` of every layer:
``converter.for_experts(start, stop)`` is a converter that fuses only those (``[stop - start, 2I, H]``),
drops the per-expert pieces of other experts, and takes fused tensors either already sliced to its
experts or whole (it slices them). ``expert_of(key)`` tells a loader which expert a per-expert key
holds, so that it can skip other ranks' experts without reading them
(``modelgraft.models.distributed.checkpoint``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from modelgraft.models.converters.base import ConversionError
from modelgraft.models.converters.layout import LayoutEvidence

__all__ = ["EXPORT_LAYOUTS", "FusedExpertsConverter"]

#: ``export_layout`` values: one ``nn.Linear`` per expert (Qwen3-MoE's hub), the modeling's fused tensors, or
#: the fused tensors stored ``[in, out]`` (Qwen3-VL-MoE's hub).
EXPORT_LAYOUTS = ("per_expert", "fused", "transposed")


@dataclass
class _LayerBuffer:
    """Per-expert pieces of one experts module, by projection role ("gate", "up", "down") and expert."""

    pieces: dict[str, dict[int, torch.Tensor]] = field(default_factory=lambda: {"gate": {}, "up": {}, "down": {}})


class FusedExpertsConverter:
    """Fuse ``<module>.<i>.{gate,up,down}_proj.weight`` into ``<module>.gate_up_proj`` / ``<module>.down_proj``.

    ``num_experts``, ``hidden_size`` and ``intermediate_size`` (the per-expert one, e.g.
    ``moe_intermediate_size``) come from the model config and fix every expected shape. ``gate``,
    ``up`` and ``down`` name the per-expert projections as the checkpoint spells them (Mixtral-style
    checkpoints use ``w1``, ``w3``, ``w2``); ``experts`` is the name of the experts module. ``layout``
    declares which way round the checkpoint stores the expert matrices (``"fused"``: ``nn.Linear``'s
    ``[out, in]``; ``"transposed"``: ``[in, out]``); None leaves it to the checkpoint's tensors. ``ignore``
    lists key prefixes whose experts are not this model's to fuse (a whole Omni checkpoint's ``talker.``, whose
    experts have other sizes and which the thinker-only model drops on load): such keys are not handled.
    """

    def __init__(
        self,
        *,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        gate: str = "gate_proj",
        up: str = "up_proj",
        down: str = "down_proj",
        experts: str = "experts",
        expert_range: tuple[int, int] | None = None,
        layout: str | None = None,
        export_layout: str = "per_expert",
        ignore: tuple[str, ...] = (),
    ) -> None:
        start, stop = (0, num_experts) if expert_range is None else expert_range
        if not 0 <= start < stop <= num_experts:
            raise ValueError(f"expert_range {expert_range} is not a non-empty range of the {num_experts} experts")
        if export_layout not in EXPORT_LAYOUTS:
            raise ValueError(f"export_layout must be one of {EXPORT_LAYOUTS}, got {export_layout!r}")
        #: How :meth:`export` writes the experts: the layout the model's hub checkpoints use.
        self.export_layout = export_layout
        self._settings = {"gate": gate, "up": up, "down": down, "experts": experts}
        self._ignore = tuple(ignore)
        #: The experts this converter emits, ``[start, stop)``: all of them unless built by ``for_experts``.
        self.expert_range = (start, stop)
        self.num_experts = num_experts
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self._names = {"gate": gate, "up": up, "down": down}
        roles = "|".join(re.escape(name) for name in (gate, up, down))
        module = rf"(?P<module>(?:.+\.)?{re.escape(experts)})"
        self._per_expert = re.compile(rf"^{module}\.(?P<expert>\d+)\.(?P<proj>{roles})\.weight$")
        self._fused = re.compile(rf"^{module}\.(?P<proj>gate_up_proj|down_proj)$")
        self._role = {gate: "gate", up: "up", down: "down"}
        self._buffers: dict[str, _LayerBuffer] = {}
        self._emitted: set[str] = set()
        self._layout = LayoutEvidence(layout)
        #: Fused tensors whose shape ties, held until the checkpoint shows its layout: (key, module, proj, tensor).
        self._held: list[tuple[str, str, str, torch.Tensor]] = []

    # -- expert parallelism -----------------------------------------------------------------------
    def for_experts(self, start: int, stop: int) -> FusedExpertsConverter:
        """A fresh converter with the same settings that emits only experts ``[start, stop)`` of each layer."""
        return FusedExpertsConverter(
            num_experts=self.num_experts,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            expert_range=(start, stop),
            layout=self._layout.declared,
            export_layout=self.export_layout,
            ignore=self._ignore,
            **self._settings,
        )

    def expert_of(self, key: str) -> int | None:
        """The expert a per-expert key holds (``...experts.17.gate_proj.weight`` -> 17); None for other keys."""
        match = self._per_expert.match(key)
        return None if match is None else int(match["expert"])

    @property
    def _local(self) -> int:
        return self.expert_range[1] - self.expert_range[0]

    def _range_text(self) -> str:
        start, stop = self.expert_range
        if self._local == self.num_experts:
            return f"{self.num_experts} experts per layer"
        return f"experts {_ranges(list(range(start, stop)))} of {self.num_experts} per layer"

    # -- the protocol ---------------------------------------------------------------------------
    def can_handle(self, key: str) -> bool:
        if key.startswith(self._ignore):
            return False
        return bool(self._per_expert.match(key) or self._fused.match(key))

    def convert(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        fused = self._fused.match(key)
        if fused is not None:
            module, proj = fused["module"], fused["proj"]
            if proj == "gate_up_proj":
                expected = (self._local, 2 * self.intermediate_size, self.hidden_size)
            else:
                expected = (self._local, self.hidden_size, self.intermediate_size)
            if self._local != self.num_experts and tensor.dim() == 3 and tensor.shape[0] == self.num_experts:
                tensor = tensor[self.expert_range[0] : self.expert_range[1]]  # whole: keep this range's experts
            if self._given_fused(f"{module}.{proj}"):
                raise ConversionError(f"{key!r} is given twice (fused, or fused and per expert)")
            layout = self._layout.layout_of(key, tensor.shape, expected)
            if layout is None:
                self._held.append((key, module, proj, tensor))
                return []
            return [self._emit(module, proj, _to_fused(tensor, layout)), *self._release()]

        match = self._per_expert.match(key)
        if match is None:
            raise ConversionError(f"{key!r} is not an expert weight this converter handles")
        module, expert, role = match["module"], int(match["expert"]), self._role[match["proj"]]
        if expert >= self.num_experts:
            raise ConversionError(f"{key!r}: expert {expert} does not exist, the model has {self.num_experts} experts")
        if not self.expert_range[0] <= expert < self.expert_range[1]:
            return []  # another rank's expert (a loader should not even read it: see expert_of)
        if role == "down":
            expected = (self.hidden_size, self.intermediate_size)
        else:
            expected = (self.intermediate_size, self.hidden_size)
        target = f"{module}.{'down_proj' if role == 'down' else 'gate_up_proj'}"
        if self._given_fused(target):
            raise ConversionError(f"{key!r}: {target!r} was already given fused; a checkpoint holds one or the other")
        pieces = self._buffers.setdefault(module, _LayerBuffer()).pieces
        if expert in pieces[role]:
            raise ConversionError(f"{key!r} appears twice in the checkpoint")
        # A piece that ties (H == I) and that nothing settled is read as what the format defines: nn.Linear's.
        layout = self._layout.layout_of(key, tensor.shape, expected) or "fused"
        pieces[role][expert] = _to_fused(tensor, layout)
        return [*self._complete(module), *self._release()]

    def finalize(self) -> list[tuple[str, torch.Tensor]]:
        """Nothing is left to emit (fused tensors go out once complete and oriented); leftovers are errors."""
        problems = []
        for module, buffer in sorted(self._buffers.items()):
            pieces = buffer.pieces
            groups = (("gate", "up"), ("down",))
            for roles in groups:
                if not any(pieces[role] for role in roles):
                    continue  # none of this group buffered: it was emitted, or the loader reports the missing key
                for role in roles:
                    missing = [i for i in range(*self.expert_range) if i not in pieces[role]]
                    if missing:
                        name = self._names[role]
                        problems.append(f"{module}.<i>.{name}.weight is missing expert(s) {_ranges(missing)}")
        self._buffers.clear()
        undecided = ""
        if self._held:
            keys = ", ".join(repr(key) for key, *_ in self._held)
            undecided = (
                f"{keys}: with hidden_size {self.hidden_size} and intermediate_size {self.intermediate_size} the "
                "shape is the same in both layouts, and no other expert tensor showed which one the checkpoint "
                "uses; declare it (layout='fused' or 'transposed')"
            )
            self._held.clear()
        if problems:
            message = f"incomplete per-expert checkpoint ({self._range_text()}): " + "; ".join(problems)
            raise ConversionError(f"{message}; {undecided}" if undecided else message)
        if undecided:
            raise ConversionError(undecided)
        return []

    # -- the way back ------------------------------------------------------------------------------
    def export(self, key: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """One whole entry of the modeling's state dict as the hub checkpoint stores it (``export_layout``).

        Fused expert tensors become one linear per expert (``per_expert``: gate rows, then up rows, of each
        expert's ``gate_up_proj``), stay as they are (``fused``) or are stored ``[in, out]``
        (``transposed``); every other key passes unchanged. What :meth:`convert` reads back.
        """
        fused = self._fused.match(key)
        if fused is None or self.export_layout == "fused":
            return [(key, tensor)]
        if tensor.dim() != 3 or tensor.shape[0] != self.num_experts:
            raise ConversionError(
                f"{key!r}: shape {list(tensor.shape)}, expected the whole tensor of {self.num_experts} experts"
            )
        if self.export_layout == "transposed":
            return [(key, tensor.transpose(-2, -1).contiguous())]
        module, proj = fused["module"], fused["proj"]
        if proj == "down_proj":
            return [(f"{module}.{e}.{self._names['down']}.weight", w.contiguous()) for e, w in enumerate(tensor)]
        out = []
        for expert, rows in enumerate(tensor):
            gate, up = rows.chunk(2, dim=0)
            out.append((f"{module}.{expert}.{self._names['gate']}.weight", gate.contiguous()))
            out.append((f"{module}.{expert}.{self._names['up']}.weight", up.contiguous()))
        return out

    # -- internals --------------------------------------------------------------------------------
    def _given_fused(self, key: str) -> bool:
        return key in self._emitted or any(f"{module}.{proj}" == key for _, module, proj, _ in self._held)

    def _release(self) -> list[tuple[str, torch.Tensor]]:
        """The held fused tensors, once the checkpoint has shown its layout."""
        layout = self._layout.known
        if layout is None or not self._held:
            return []
        held, self._held = self._held, []
        return [self._emit(module, proj, _to_fused(tensor, layout)) for _, module, proj, tensor in held]

    def _complete(self, module: str) -> list[tuple[str, torch.Tensor]]:
        """Emit the fused tensors of ``module`` whose per-expert pieces are all here."""
        pieces = self._buffers[module].pieces
        out = []
        experts = range(*self.expert_range)
        if len(pieces["gate"]) == len(pieces["up"]) == self._local:
            gate_up = torch.stack([torch.cat((pieces["gate"][i], pieces["up"][i])) for i in experts])
            out.append(self._emit(module, "gate_up_proj", gate_up))
            pieces["gate"].clear()
            pieces["up"].clear()
        if len(pieces["down"]) == self._local:
            out.append(self._emit(module, "down_proj", torch.stack([pieces["down"][i] for i in experts])))
            pieces["down"].clear()
        if not any(pieces.values()):
            del self._buffers[module]
        return out

    def _emit(self, module: str, proj: str, tensor: torch.Tensor) -> tuple[str, torch.Tensor]:
        key = f"{module}.{proj}"
        if key in self._emitted:
            raise ConversionError(f"{key!r} is given twice (fused, or fused and per expert)")
        self._emitted.add(key)
        return key, tensor


def _to_fused(tensor: torch.Tensor, layout: str) -> torch.Tensor:
    """``tensor``, stored in ``layout``, as the modeling holds it (``nn.Linear``'s ``[out, in]``)."""
    return tensor if layout == "fused" else tensor.transpose(-2, -1).contiguous()


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``: readable even when a whole layer is missing."""
    parts = []
    start = prev = None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(parts)
