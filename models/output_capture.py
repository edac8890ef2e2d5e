"""Outputs recorded by upstream's hooks (router logits, attentions), readable by layers compiled one by one.

transformers records a model's extra outputs through forward hooks on the modules that produce them
(``_can_record_outputs``: the router logits a MoE aux loss needs, hidden states, attentions). Each hook looks
up the collector of the running forward (a dict of lists) in a module-level ``CompileableContextVar``, which
reads a ``contextvars.ContextVar`` unless the whole model is being compiled. Dynamo cannot trace
``ContextVar.get``, so a decoder layer compiled on its own (``layer.compile(fullgraph=True)``, as torchtitan
compiles each block) fails at the first hooked module of a forward that records anything, and without
``fullgraph`` breaks its graph there on every step: upstream's layers as well as the generated ones.

:func:`trace_recorded_outputs` replaces that collector with :class:`TracedCollector`. Eager code sees upstream's
behaviour unchanged (the context variable: each thread and context records its own outputs). Code being compiled
reads a staging copy of the running collector instead, an attribute: the same keys, each list empty but the hidden
states' (their hook reads how many the list holds, and hangs on the layers themselves). Dynamo guards
on what it reads, so reading the collector's lists themselves, which grow by one entry per layer, would compile
each layer of a deep model again (a guard on each list's length); the staging lists are empty at every layer's
entry, and after each compiled layer :meth:`TracedCollector.flush` moves what the layer recorded to the running
collector's lists, in order. The recorded tensors are outputs of the layer's graph, and their gradients flow back
through it. Like upstream's whole-model compile, the compiled side is not thread-safe: two threads running
compiled layers of recording models at once would share the staging copy.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from transformers.utils import output_capturing
from transformers.utils.import_utils import is_torchdynamo_compiling

__all__ = ["TracedCollector", "flush_recorded_outputs", "trace_recorded_outputs"]


class _Saved(NamedTuple):
    """What :meth:`TracedCollector.set` replaced: the context variable's token, the running collector and its
    staging copy (a nested model's forward records into its own collector, then the outer one's is back)."""

    token: Any
    collector: Any
    staging: Any


#: The recorded output whose hook reads how much its list holds (the first hidden state is the first layer's
#: input; an ``output_hidden_states`` selection counts the layers): compiled code gets the running list itself.
#: Its hook hangs on the layers, which ``compile_layers`` keeps outside the compiled code.
_COUNTED = "hidden_states"


def _staging(collector: Any) -> Any:
    if not isinstance(collector, dict):
        return collector
    return {key: [] if isinstance(value, list) and key != _COUNTED else value for key, value in collector.items()}


class TracedCollector(output_capturing.CompileableContextVar):
    """Upstream's collector of recorded outputs, whose running value compiled code reads from a staging copy.

    Built from the collector it replaces and sharing its context variable, so a forward that is recording when the
    replacement happens keeps its collector, for its eager code and its compiled layers alike.
    """

    def __init__(self, replaced: output_capturing.CompileableContextVar) -> None:
        self.context_var = replaced.context_var
        self.global_var = replaced.global_var
        self.compiling = replaced.compiling
        #: The running collector (eager code's value) and its staging copy, which compiled layers append to.
        self.collector: Any = None
        self.staging: Any = None
        self._follow_context()

    def _follow_context(self) -> None:
        """Take the context variable's collector as the running one: it was set before this object took over."""
        running = self.context_var.get()
        self.collector, self.staging = running, _staging(running)

    def get(self) -> Any:
        if is_torchdynamo_compiling():
            return self.global_var if self.compiling else self.staging
        return super().get()

    def set(self, value: Any) -> Any:
        if is_torchdynamo_compiling():  # the whole model being compiled: upstream's own path
            return super().set(value)
        saved = _Saved(super().set(value), self.collector, self.staging)
        self.collector, self.staging = value, _staging(value)
        return saved

    def reset(self, token: Any) -> None:
        if isinstance(token, _Saved):
            self.flush()
            super().reset(token.token)
            self.collector, self.staging = token.collector, token.staging
        elif self.compiling or token is None:
            super().reset(token)
        else:  # a forward that began recording before the replacement ends
            self.flush()
            super().reset(token)
            self._follow_context()

    def flush(self) -> None:
        """Move what compiled code recorded into the staging lists to the running collector's lists."""
        if not isinstance(self.staging, dict):
            return
        for key, staged in self.staging.items():
            if isinstance(staged, list) and staged and staged is not self.collector[key]:
                self.collector[key].extend(staged)
                staged.clear()


def flush_recorded_outputs() -> None:
    """Move what compiled layers recorded to the running forward's collector, where :func:`trace_recorded_outputs`
    replaced upstream's (otherwise nothing was staged)."""
    collector = output_capturing._active_collector
    if isinstance(collector, TracedCollector):
        collector.flush()


def trace_recorded_outputs() -> TracedCollector:
    """Make the outputs upstream's hooks record readable by layers compiled one by one (process-wide, idempotent);
    returns the collector in use.

    :func:`modelgraft.models.compiling.compile_layers` calls it, and flushes after each compiled layer. Raises
    ``TypeError`` naming what it found where transformers keeps another kind of collector.
    """
    current = getattr(output_capturing, "_active_collector", None)
    if isinstance(current, TracedCollector):
        return current
    if not isinstance(current, output_capturing.CompileableContextVar):
        raise TypeError(
            "trace_recorded_outputs: transformers.utils.output_capturing._active_collector is "
            f"{type(current).__name__}, not the CompileableContextVar it replaces: the way transformers records "
            'outputs has changed (docs/compile.md, "Recorded outputs in compiled layers")'
        )
    output_capturing._active_collector = TracedCollector(current)
    return output_capturing._active_collector
