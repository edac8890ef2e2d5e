"""Read an Omni model's thinker and speech side from its pinned source: what the omni recipe keeps and drops.

A Qwen-Omni-like model (docs/scaffolding.md, "Omni scaffolds") is a top-level ``*ForConditionalGeneration``
that holds a thinker (the audio and vision towers and the text decoder behind a conditional-generation head)
and a speech side (a talker, and token2wav or code2wav), each as an attribute built in its ``__init__``. The
omni recipe keeps the thinker and excludes the speech side: the classes only the speech attributes reach are
the recipe's ``speech_classes``, the attributes its state-dict hook drops (``talker.*``, ``token2wav.*``). Both
are read here from the class tree, with ``ast`` (nothing is imported); a model without that shape gets one
line per difference, for the scaffold's refusal.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from modelgraft.generator.upstream.source import ModelSource, called_name, calls_in, dotted, is_self_attr

__all__ = ["OmniInfo", "read_omni"]

#: The attribute the top-level class holds its thinker under, and the words a speech attribute's name holds.
THINKER_ATTR = "thinker"
SPEECH_WORDS = ("talker", "token2wav", "code2wav", "vocoder")


@dataclass(frozen=True)
class OmniInfo:
    """The thinker / speech split of an Omni model (``ModelStructure.omni``)."""

    #: The top-level class holding the thinker and the speech side ("Qwen2_5OmniForConditionalGeneration").
    top_level: str | None
    #: The thinker's class ("Qwen2_5OmniThinkerForConditionalGeneration").
    thinker: str | None = None
    #: The top-level attributes of the speech side, in ``__init__`` order ("talker", "token2wav").
    speech: tuple[str, ...] = ()
    #: Classes of the module only the speech attributes reach (the thinker reaches none of them).
    speech_classes: tuple[str, ...] = ()
    #: What sets the model apart from a Qwen-Omni-like one, one line each; empty when it is one.
    differences: tuple[str, ...] = ()


def read_omni(source: ModelSource) -> OmniInfo:
    """The thinker, the speech attributes and the classes only they reach, or why the model is not Qwen-Omni-like.

    The speech side may be built outside ``__init__`` (Qwen-Omni builds it in ``enable_talker``): every method
    of the top-level class is read for ``self.<attr> = <Class>(...)`` / ``<Class>._from_config(...)``.
    """
    top = next((cls for cls in source.classes if THINKER_ATTR in _built(source, cls)), None)
    if top is None:
        return OmniInfo(top_level=None, differences=("no class holds a thinker (self.thinker)",))
    built = _built(source, top)
    thinker = built[THINKER_ATTR][0] if built[THINKER_ATTR] else None
    speech = tuple(attr for attr in built if attr != THINKER_ATTR and any(word in attr for word in SPEECH_WORDS))
    differences = []
    if not any("talker" in attr for attr in speech):
        differences.append(f"{top} builds no talker: an audio tower without a speech side to drop")
    kept = _reachable(source, [thinker] if thinker else [])
    dropped = _reachable(source, [cls for attr in speech for cls in built[attr]])
    return OmniInfo(
        top_level=top,
        thinker=thinker,
        speech=speech,
        speech_classes=tuple(cls for cls in dropped if cls not in kept),
        differences=tuple(differences),
    )


def _classes_built(source: ModelSource, node: ast.AST) -> list[str]:
    """Classes of the module a value builds: ``Cls(...)``, ``Cls._from_config(...)``, ``Cls.from_config(...)``."""
    found = []
    for call in calls_in(node):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in ("_from_config", "from_config"):
            name = dotted(func.value)
        else:
            name = called_name(call) or ""
        if name in source.classes and name not in found:
            found.append(name)
    return found


def _built(source: ModelSource, cls: str) -> dict[str, list[str]]:
    """``self.<attr>`` -> the module classes any method of ``cls`` assigns to it, for attributes built so."""
    node = source.classes.get(cls)
    found: dict[str, list[str]] = {}
    for stmt in ast.walk(node) if node is not None else ():
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if is_self_attr(target) and (classes := _classes_built(source, stmt.value)):
                    found.setdefault(target.attr, []).extend(c for c in classes if c not in found[target.attr])
    return found


def _reachable(source: ModelSource, start: list[str]) -> list[str]:
    """``start`` and every class of the module their methods build, transitively, in discovery order."""
    seen: list[str] = []
    todo = list(start)
    while todo:
        cls = todo.pop(0)
        if cls in seen or cls not in source.classes:
            continue
        seen.append(cls)
        todo.extend(name for name in _classes_built(source, source.classes[cls]) if name not in seen)
        todo.extend(base for base in source.base_names(cls) if base in source.classes and base not in seen)
    return seen
