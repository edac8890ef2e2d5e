"""Read an Omni model's thinker and speech side from its pinned source: what the omni recipe keeps and drops.

A Qwen-Omni-like model (docs/scaffolding.md, "Omni scaffolds") is a top-level ``*ForConditionalGeneration``
that holds a thinker and a speech side (a talker, and token2wav or code2wav), each as an attribute built in its
``__init__``. The thinker is a conditional-generation head over a thinker model (``self.model``; transformers 5.16's
thinker held its parts itself) that holds the audio and vision towers and the text decoder, as a Qwen-VL head holds
its ``<Prefix>Model``. The omni recipe keeps the thinker and excludes the speech side: the classes only the speech
attributes reach are the recipe's ``speech_classes``, the attributes its state-dict hook drops (``talker.*``,
``token2wav.*``). Both are read here from the class tree, with ``ast`` (nothing is imported); a model without that
shape gets one line per difference, for the scaffold's refusal.

For the scaffold's recipe call (docs/scaffolding.md, "Omni scaffolds") the thinker's own parts are read too: its
thinker model and the towers and text decoder that builds, the audio tower's first convolution, the text attention's
rotary function, the top-level members that only serve audio output, the package's processors, and the base class's
``_init_weights`` with the branches that name a speech class taken out (a kept method naming an excluded class
would stop generation). For a MoE thinker (Qwen3-Omni-MoE) also: the ``PreTrainedModel`` classes of the module
other than the base class (its thinker text model's base, which only the talker derives from), experts whose
activation only ``__init__`` can name, and an output the thinker builds without the router logits it has.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from modelgraft.generator.upstream.index import ModuleIndex
from modelgraft.generator.upstream.read_config import _defaults
from modelgraft.generator.upstream.read_processors import read_processors
from modelgraft.generator.upstream.source import ModelSource, called_name, calls_in, dotted, is_self_attr
from modelgraft.generator.upstream.vlm_structure import ProcessorInfo

__all__ = ["InitWeights", "OmniInfo", "read_omni"]

#: The attribute the top-level class holds its thinker under, and the words a speech attribute's name holds.
THINKER_ATTR = "thinker"
SPEECH_WORDS = ("talker", "token2wav", "code2wav", "vocoder")
#: The thinker's attribute holding its thinker model, and the thinker model's attributes holding its audio tower,
#: its vision tower and its text decoder.
MODEL_ATTR = "model"
AUDIO_ATTR, VISION_ATTR, TEXT_ATTR = "audio_tower", "visual", "language_model"
#: Top-level members that only serve audio output (Qwen-Omni's), each with what it does, for its error.
AUDIO_OUTPUT_MEMBERS = {"generate": "generation", "enable_talker": "audio output", "load_speakers": "speaker loading"}


@dataclass(frozen=True)
class InitWeights:
    """The base class's ``_init_weights`` less its branches that name a speech class (a one-off override)."""

    #: The class defining it ("Qwen2_5OmniPreTrainedModel") and its parameters.
    owner: str
    params: tuple[str, ...]
    #: The kept body, dedented to the function's level, as upstream's text.
    body: str
    #: The speech classes the dropped branches named.
    dropped: tuple[str, ...]
    #: Import lines for the names the kept body uses (upstream's imports, made absolute), sorted as isort does.
    imports: tuple[str, ...]


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
    #: The top-level class's config class (``config: Qwen2_5OmniConfig`` or ``config_class = ...``).
    top_level_config: str | None = None
    #: The thinker model the thinker holds as ``self.model`` ("Qwen2_5OmniThinkerModel"), and the towers and text
    #: decoder it holds (``self.audio_tower``, ``self.visual``, ``self.language_model``).
    thinker_model: str | None = None
    audio: str | None = None
    vision: str | None = None
    text_model: str | None = None
    #: The audio tower's own ``nn.LayerNorm`` attributes its forward calls (Qwen-Omni's ``ln_post``, called inside
    #: another call, where the call-site reader does not look).
    audio_layer_norms: tuple[str, ...] = ()
    #: The audio tower's first convolution: (attribute, "Conv1d" or "Conv2d"), or None when not found.
    audio_conv: tuple[str, str] | None = None
    #: The rotary function the thinker's text attention calls, and whether it takes ``mrope_section``.
    text_rope: str | None = None
    text_rope_sectioned: bool = False
    #: The rotary function the vision tower's attention calls.
    vision_rope: str | None = None
    #: The top-level members that only serve audio output, each with what it does.
    refused: tuple[tuple[str, str], ...] = ()
    #: The package's processing classes (the processor the tests build, its PIL image processor).
    processors: tuple[ProcessorInfo, ...] = ()
    #: The base class's ``_init_weights`` without its speech branches, when it has any.
    init_weights: InitWeights | None = None
    #: Kept classes of the module that derive from transformers' ``PreTrainedModel`` itself, in source order (the
    #: base class, and Qwen3-Omni-MoE's ``ThinkerTextPreTrainedModel``, upstream's public API).
    pretrained_bases: tuple[str, ...] = ()
    #: (experts class, config attribute) where the thinker's experts name their activation only in ``__init__``
    #: (``ACT2FN[config.<attr>]``), their config annotated as a class that declares no ``<attr>``: the name must
    #: be recorded there (``activation_name_init``), as ``self.experts.config.<attr>`` is not what the source says.
    experts_activation_init: tuple[str, str] | None = None
    #: (output class, expression) where the thinker's forward builds its output, a class with ``router_logits``,
    #: without them while it hands ``<expression>`` to its aux-loss function (Qwen3-Omni-MoE's thinker).
    router_logits: tuple[str, str] | None = None


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
    speech_classes = [cls for cls in dropped if cls not in kept and not _public_base_only(source, cls)]
    # A class deriving from a speech class that nothing kept builds (a deprecated alias) goes with it.
    speech_classes += [
        cls
        for cls in source.classes
        if cls not in kept and cls not in speech_classes and set(source.base_names(cls)) & set(speech_classes)
    ]
    model = _built(source, thinker).get(MODEL_ATTR, [None])[0] if thinker else None
    parts = _built(source, model) if model else {}
    audio, vision, text = (parts.get(attr, [None])[0] for attr in (AUDIO_ATTR, VISION_ATTR, TEXT_ATTR))
    rope = _rope_called(source, text, vision)
    methods = {node.name for node in ast.walk(source.classes[top]) if isinstance(node, ast.FunctionDef)}
    return OmniInfo(
        top_level=top,
        thinker=thinker,
        speech=speech,
        speech_classes=tuple(speech_classes),
        differences=tuple(differences),
        top_level_config=_config_class(source.classes[top]),
        thinker_model=model,
        audio=audio,
        vision=vision,
        text_model=text,
        audio_conv=_first_conv(source, audio) if audio else None,
        audio_layer_norms=_called_layer_norms(source, audio) if audio else (),
        text_rope=rope,
        text_rope_sectioned=rope is not None and _takes(source, rope, "mrope_section"),
        vision_rope=_rope_called(source, vision, text),
        refused=tuple((name, what) for name, what in AUDIO_OUTPUT_MEMBERS.items() if name in methods),
        # the top-level model_type, the package's name, is the one the Auto tables map to image processors
        processors=read_processors(source, source.model),
        init_weights=_init_weights(source, f"{source.index.module}", speech_classes),
        pretrained_bases=tuple(
            cls for cls in source.classes if cls not in speech_classes and "PreTrainedModel" in source.base_names(cls)
        ),
        experts_activation_init=_experts_activation_init(source, kept),
        router_logits=_dropped_router_logits(source, thinker) if thinker else None,
    )


def _public_base_only(source: ModelSource, cls: str) -> bool:
    """``cls`` is upstream's public API (``__all__``), derives from no class of the module and nothing builds it:
    the speech side reaches it only as a base class (Qwen3-Omni-MoE's talker derives from the thinker text model's
    ``ThinkerTextPreTrainedModel``), and it holds nothing of the speech side, so it is kept."""
    if cls not in source.index.public_names or any(base in source.classes for base in source.base_names(cls)):
        return False
    return not any(cls in _classes_built(source, node) for node in source.classes.values())


def _experts_activation_init(source: ModelSource, kept: list[str]) -> tuple[str, str] | None:
    """The kept experts class (``@use_experts_implementation``) whose activation only ``__init__`` names, and the
    config attribute it reads: its ``config`` parameter annotated as a config class that declares no such field."""
    for cls in kept:
        if "use_experts_implementation" not in source.decorator_names(cls) or source.stores_config(cls):
            continue
        init = source.own_method(cls, "__init__")
        act = source.init_assigns(cls).get("act_fn", [])
        if init is None or len(init.args.args) < 2 or not act:
            continue
        value = act[0]
        if not (
            isinstance(value, ast.Subscript)
            and isinstance(value.slice, ast.Attribute)
            and dotted(value.slice.value) == init.args.args[1].arg
        ):
            continue
        annotation = init.args.args[1].annotation
        if not isinstance(annotation, ast.Name):
            continue
        found = source.sources.resolve_class(source.index, annotation.id)
        if found is not None and value.slice.attr not in _defaults(source.sources, found[0], annotation.id):
            return cls, value.slice.attr
    return None


def _dropped_router_logits(source: ModelSource, thinker: str) -> tuple[str, str] | None:
    """The output class the thinker's forward returns without ``router_logits=`` although the class has the field
    (its own or a base's, transformers' ``MoeCausalLMOutputWithPast``), and the router logits the forward hands a
    call (its aux-loss function) as the first argument."""
    forward = source.own_method(thinker, "forward")
    if forward is None:
        return None
    logits = [
        call.args[0]
        for call in calls_in(forward)
        if call.args and isinstance(call.args[0], ast.Attribute) and call.args[0].attr == "router_logits"
    ]
    for node in ast.walk(forward):
        if not (isinstance(node, ast.Return) and isinstance(node.value, ast.Call)):
            continue
        cls = dotted(node.value.func)
        if cls not in source.classes or "router_logits" in {kw.arg for kw in node.value.keywords}:
            continue
        if logits and _declares_field(source, source.index, cls, "router_logits"):
            return cls, dotted(logits[0])
    return None


def _declares_field(source: ModelSource, index: ModuleIndex, cls: str, name: str) -> bool:
    """``cls`` (as seen from ``index``) or one of its bases, followed into other modules, annotates ``name``."""
    found = source.sources.resolve_class(index, cls)
    if found is None:
        return False
    owner, node = found
    if any(
        isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name
        for stmt in node.body
    ):
        return True
    return any(_declares_field(source, owner, base.id, name) for base in node.bases if isinstance(base, ast.Name))


def _config_class(node: ast.ClassDef) -> str | None:
    """The class body's ``config: <Config>`` annotation or ``config_class = <Config>``."""
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == "config":
            return dotted(stmt.annotation) or None
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "config_class" for t in stmt.targets
        ):
            return dotted(stmt.value) or None
    return None


def _called_layer_norms(source: ModelSource, cls: str) -> tuple[str, ...]:
    """``self.<attr>`` of ``cls.__init__`` built as ``nn.LayerNorm(...)`` and called in ``cls.forward``."""
    norms = [
        attr
        for attr, values in source.init_assigns(cls).items()
        if any(isinstance(v, ast.Call) and dotted(v.func).split(".")[-1] == "LayerNorm" for v in values)
    ]
    forward = source.own_method(cls, "forward")
    if forward is None:
        return ()
    called = {
        call.func.attr
        for call in calls_in(forward)
        if isinstance(call.func, ast.Attribute) and is_self_attr(call.func)
    }
    return tuple(attr for attr in norms if attr in called)


def _first_conv(source: ModelSource, cls: str) -> tuple[str, str] | None:
    """The first ``self.<attr> = nn.Conv1d(...)`` / ``nn.Conv2d(...)`` of the tower's ``__init__``."""
    found = []
    for attr, values in source.init_assigns(cls).items():
        for value in values:
            if isinstance(value, ast.Call) and dotted(value.func).split(".")[-1] in ("Conv1d", "Conv2d"):
                found.append((value.lineno, attr, dotted(value.func).split(".")[-1]))
    return min(found)[1:] if found else None


def _takes(source: ModelSource, function: str, param: str) -> bool:
    node = source.functions.get(function)
    return node is not None and param in [arg.arg for arg in node.args.args]


def _rope_called(source: ModelSource, start: str | None, other: str | None) -> str | None:
    """The module-level rotary function (``apply_*rotary_pos_emb*``) called by a class ``start`` reaches and
    ``other`` does not: the text attention's (start: the text decoder), or the vision tower's."""
    if start is None:
        return None
    towers = set(_reachable(source, [other])) if other else set()
    for cls in _reachable(source, [start]):
        if cls in towers:
            continue
        for call in calls_in(source.classes[cls]):
            name = called_name(call) or ""
            if name in source.functions and "rotary_pos_emb" in name and name.startswith("apply_"):
                return name
    return None


def _init_weights(source: ModelSource, module: str, speech: list[str]) -> InitWeights | None:
    """The ``_init_weights`` of a module class whose if/elif branches test for a speech class, those taken out.

    Each branch of the body's ``isinstance`` chain is kept or dropped whole, as upstream's text (sliced by the
    tree's positions); the statements before and after the chain stay as they are.
    """
    for cls, node in source.classes.items():
        func = next(
            (f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "_init_weights"),
            None,
        )
        if func is None:
            continue
        lines = source.index.lines
        kept: list[str] = []
        dropped: list[str] = []
        for stmt in func.body:
            if not isinstance(stmt, ast.If):
                kept.append(_text(lines, stmt.lineno, stmt.end_lineno))
                continue
            branches, rest = _chain(stmt)
            chain = []
            for test, body in branches:
                named = sorted({n.id for n in ast.walk(test) if isinstance(n, ast.Name)} & set(speech))
                if named:
                    dropped += named
                    continue
                keyword = "if" if not chain else "elif"
                chain.append(f"{keyword} {source.index.segment(test)}:\n")
                chain += [_text(lines, b.lineno, b.end_lineno, indent=4) for b in body]
            if rest:
                chain.append("else:\n" if chain else "")
                chain += [_text(lines, b.lineno, b.end_lineno, indent=4 if len(chain) > 1 else 0) for b in rest]
            kept += chain
        if not dropped:
            continue
        body = "".join(kept)
        return InitWeights(
            owner=cls,
            params=tuple(arg.arg for arg in func.args.args),
            body=body,
            dropped=tuple(dropped),
            imports=_imports_for(source, module, body),
        )
    return None


def _chain(stmt: ast.If) -> tuple[list[tuple[ast.expr, list[ast.stmt]]], list[ast.stmt]]:
    """An ``if / elif / else`` chain as (test, body) pairs and the final ``else`` body."""
    branches = [(stmt.test, stmt.body)]
    rest = stmt.orelse
    while len(rest) == 1 and isinstance(rest[0], ast.If):
        branches.append((rest[0].test, rest[0].body))
        rest = rest[0].orelse
    return branches, rest


def _text(lines: list[str], first: int, last: int | None, *, indent: int = 0) -> str:
    """Source lines ``first`` to ``last`` (1-based), dedented to the function body's level plus ``indent``."""
    chunk = lines[first - 1 : (last or first)]
    margin = len(chunk[0]) - len(chunk[0].lstrip())
    return "".join((" " * indent + line[margin:]) if line.strip() else "\n" for line in chunk)


def _imports_for(source: ModelSource, module: str, body: str) -> tuple[str, ...]:
    """Import lines for the names ``body`` loads: the module's own members from the module, the rest as upstream
    imports them (relative imports made absolute)."""
    names = {n.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    plain: set[str] = set()
    froms: dict[str, set[str]] = {}
    for node in source.index.tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name) in names:
                    plain.add(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
        elif isinstance(node, ast.ImportFrom):
            base = module.split(".")[: -node.level] if node.level else []
            origin = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                if (alias.asname or alias.name) in names:
                    froms.setdefault(origin, set()).add(alias.name + (f" as {alias.asname}" if alias.asname else ""))
    own = names & (set(source.classes) | set(source.functions))
    if own:
        froms.setdefault(module, set()).update(own)
    return tuple(sorted(plain)) + tuple(
        f"from {origin} import {', '.join(sorted(froms[origin], key=str.lower))}" for origin in sorted(froms)
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
