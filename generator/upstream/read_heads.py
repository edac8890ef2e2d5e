"""The task heads of a model: which exist, and what the causal LM's forward does between lm_head and loss.

The fused-loss guard replaces ``logits = self.lm_head(h)`` ... ``loss = self.loss_function(...)`` with one
call that never materialises the logits; that is only equal to upstream when every statement between the
two is a scaling the slot can apply itself (softcapping, a division or a multiplication), so anything
else is named with its line and the head is left unguarded.
"""

from __future__ import annotations

import ast

from modelgraft.generator.upstream.read_auto import auto_causal_lm_classes
from modelgraft.generator.upstream.shapes import expr_binding, match_body
from modelgraft.generator.upstream.source import (
    ModelSource,
    called_name,
    calls_in,
    constructed_class,
    dotted,
    is_self_attr,
)
from modelgraft.generator.upstream.structure import CausalLmInfo, Multipliers, SequenceClassificationInfo

HEAD_SUFFIXES = {
    "causal_lm": "ForCausalLM",
    "sequence_classification": "ForSequenceClassification",
    "token_classification": "ForTokenClassification",
    "question_answering": "ForQuestionAnswering",
}

_SOFTCAP = "P_l = P_l / E_cap\nP_l = torch.tanh(P_l)\nP_l = P_l * E_cap"
# The same soft-cap on logits upcast to fp32 first (beam): the logits stay fp32 from there on.
_SOFTCAP_FP32 = "P_l = P_l.float() / E_cap\nP_l = torch.tanh(P_l)\nP_l = P_l * E_cap"


def read_heads(source: ModelSource, prefix: str) -> dict[str, str]:
    """Head kind -> class for the heads named ``<prefix><suffix>`` (any prefix when that one is absent).

    A module without a ``*ForCausalLM`` may still define the class ``AutoModelForCausalLM`` builds under another
    name (:func:`auto_causal_lm`): that class is its causal LM.
    """
    heads: dict[str, str] = {}
    for kind, suffix in HEAD_SUFFIXES.items():
        exact = prefix + suffix
        if exact in source.classes:
            heads[kind] = exact
            continue
        candidates = [c for c in source.classes if c.endswith(suffix)]
        if candidates:
            heads[kind] = min(candidates, key=len)
    if "causal_lm" not in heads and (named := auto_causal_lm(source)) is not None:
        heads["causal_lm"] = named
    return heads


def auto_causal_lm(source: ModelSource) -> str | None:
    """The class of this module that transformers' Auto causal-LM table names (``GPT2LMHeadModel``), if any.

    A ``*ForConditionalGeneration`` the table names (gemma3's) is not taken: a multimodal head is read as one
    (the reader's VLM and Omni paths), not as a text causal LM.
    """
    table = auto_causal_lm_classes(source.sources)
    named = [cls for cls in source.classes if cls in table and not cls.endswith("ForConditionalGeneration")]
    return min(named, key=len) if named else None


def read_sequence_classification(source: ModelSource, cls: str) -> SequenceClassificationInfo:
    line = source.classes[cls].lineno
    own = source.own_method(cls, "forward")
    if own is not None:
        return SequenceClassificationInfo(cls, line, generic=False, reason=f"own forward (line {own.lineno})")
    found = source.method(cls, "forward")
    owner = found[1] if found is not None else None
    if owner == "GenericForSequenceClassification" or "GenericForSequenceClassification" in source.base_names(cls):
        return SequenceClassificationInfo(cls, line, generic=True)
    return SequenceClassificationInfo(cls, line, generic=False, reason=f"forward inherited from {owner}")


def read_causal_lm(source: ModelSource, cls: str) -> CausalLmInfo:
    line = source.classes[cls].lineno
    found = source.method(cls, "forward")
    if found is None:
        return CausalLmInfo(cls, line, reason="no forward")
    forward, owner = found
    params = tuple(a.arg for a in forward.args.args[1:] + forward.args.kwonlyargs)
    base = {
        "cls": cls,
        "line": line,
        "params": params,
        "inherited_from": owner,
        "output_class": _output_class(forward),
        "lm_head_bias": _lm_head_bias(source, cls, head_attr := _head_attr(source, cls)),
        "head_attr": head_attr,
        "aux_loss_function": _aux_loss_function(source, forward),
    }
    where = f"{owner or cls}.forward" + (f" (inherited from {owner})" if owner else f" (line {forward.lineno})")
    body = forward.body
    head_at = _find_lm_head(body, head_attr)
    if head_at is None:
        return CausalLmInfo(**base, reason=f"{where}: no top-level `logits = self.{head_attr}(...)`")
    own_head = head_with_own_forward(source, cls, head_attr)
    if own_head:
        return CausalLmInfo(**base, reason=own_head)
    head_stmt = body[head_at]
    assert isinstance(head_stmt, ast.Assign)
    logits_var = dotted(head_stmt.targets[0])
    call, on_head = _head_call(head_stmt.value, head_attr)
    assert call is not None
    base["hidden_arg"] = dotted(call.args[0]) if call.args else None
    base["logits_var"] = logits_var
    loss_at, loss_call = _find_loss(body, head_at)
    if loss_call is None:
        return CausalLmInfo(**base, reason=f"{where}: no self.loss_function(...) call after the lm_head")
    base["vocab_size_expr"] = _vocab_size(loss_call)
    postprocess, problem = _between(body[head_at + 1 : loss_at], logits_var)
    postprocess = (*on_head, *postprocess)
    if problem is None:
        problem = _loss_statement_problem(body[loss_at], logits_var)
    if problem is None and base["vocab_size_expr"] is None:
        problem = f"loss_function call (line {loss_call.lineno}) passes no vocab_size"
    return CausalLmInfo(**base, postprocess=postprocess, reason=f"{where}: {problem}" if problem else "")


#: Methods on the projected logits that change no value a fused loss computes: ``.float()`` changes the dtype of
#: the logits the model returns, which is recorded as an "upcast" step.
_NEUTRAL_METHODS = ("float", "contiguous")

#: The postprocess step of logits upcast to fp32 on the head call itself (mllama's ``self.lm_head(h).float()``).
UPCAST = ("upcast", "")


def _head_call(value: ast.expr, attr: str) -> tuple[ast.Call | None, tuple[tuple[str, str], ...]]:
    """``self.<attr>(h)``, possibly ``.float()`` / ``.contiguous()``, possibly times or over a scale.

    Returns the head call and the steps on it: the scale step, e.g. hyperclovax's ``self.lm_head(h) *
    self.config.logits_scaling``, and :data:`UPCAST` for a ``.float()``.
    """
    steps: list[tuple[str, str]] = []
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Mult, ast.Div)):
        scale = ("scale_mul" if isinstance(value.op, ast.Mult) else "scale_div", dotted(value.right))
        if not scale[1]:
            return None, ()
        steps.append(scale)
        value = value.left
    while (
        isinstance(value, ast.Call)
        and not value.args
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in _NEUTRAL_METHODS
    ):
        if value.func.attr == "float" and UPCAST not in steps:
            steps.insert(0, UPCAST)
        value = value.func.value
    if isinstance(value, ast.Call) and is_self_attr(value.func, attr):
        return value, tuple(steps)
    return None, ()


def _find_lm_head(body: list[ast.stmt], attr: str = "lm_head") -> int | None:
    for i, stmt in enumerate(body):
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and _head_call(stmt.value, attr)[0] is not None
        ):
            return i
    return None


def _head_attr(source: ModelSource, cls: str) -> str:
    """The output projection: ``lm_head``, or the Linear onto the vocabulary (biogpt's ``output_projection``)."""
    assigns = source.init_assigns(cls)
    if "lm_head" in assigns:
        return "lm_head"
    for attr, values in assigns.items():
        for value in values:
            if isinstance(value, ast.Call) and called_name(value) == "Linear" and "vocab_size" in ast.unparse(value):
                return attr
    return "lm_head"


def head_with_own_forward(source: ModelSource, cls: str, attr: str) -> str:
    """Why the head's projection is not its weight alone, or "": the fused loss multiplies by the weight itself.

    Dory's ``DoryLMHead(nn.Linear)`` scales each vocabulary entry's logit in its own forward, and Ergo's head
    upcasts to fp32 before projecting: a loss fused with ``self.<attr>.weight`` would skip what that forward does.
    """
    for value in source.init_assigns(cls).get(attr, []):
        head_cls = constructed_class(value) if isinstance(value, ast.Call) else None
        if head_cls is None or head_cls not in source.classes:
            continue
        forward = source.local_method(head_cls, "forward")
        if forward is not None:
            return (
                f"self.{attr} is {head_cls} (line {source.classes[head_cls].lineno}), whose own forward "
                f"(line {forward.lineno}) a loss fused with its weight would skip"
            )
    return ""


def _is_loss_call(call: ast.Call) -> bool:
    return is_self_attr(call.func, "loss_function")


def _find_loss(body: list[ast.stmt], after: int) -> tuple[int, ast.Call | None]:
    for i in range(after + 1, len(body)):
        for call in calls_in(body[i]):
            if _is_loss_call(call):
                return i, call
    return len(body), None


def _vocab_size(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "vocab_size":
            return dotted(kw.value)
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    return dotted(positional[2]) if len(positional) >= 3 else None


def _between(stmts: list[ast.stmt], logits: str) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """The recognised steps between lm_head and the loss statement, or the first statement that is not one."""
    steps: list[tuple[str, str]] = []
    i = 0
    while i < len(stmts):
        stmt = stmts[i]
        # `loss = None` (or any name set to None) computes nothing.
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Constant)
            and stmt.value.value is None
            and all(isinstance(t, ast.Name) and t.id != logits for t in stmt.targets)
        ):
            i += 1
            continue
        softcap = _softcap(stmts[i : i + 3], logits)
        if softcap is not None:
            steps.append(softcap)
            i += 3
            continue
        if isinstance(stmt, ast.If) and not stmt.orelse:
            cap = _guarded_softcap(stmt, logits)
            if cap is not None:
                steps.append(cap)
                i += 1
                continue
        aliased = _aliased_softcap(stmts[i : i + 2], logits)
        if aliased is not None:
            steps.append(aliased)
            i += 2
            continue
        scale = _scale(stmt, logits) or _guarded_scale(stmt, logits)
        if scale is not None:
            steps.append(scale)
            i += 1
            continue
        return tuple(steps), f"line {stmt.lineno} between lm_head and loss is not a recognised logits step"
    return tuple(steps), None


def _softcap(stmts: list[ast.stmt], logits: str) -> tuple[str, str] | None:
    """("softcap" or "softcap_fp32", cap) for the three soft-capping statements, in the model dtype or in fp32."""
    if len(stmts) < 3:
        return None
    for op, pattern in (("softcap", _SOFTCAP), ("softcap_fp32", _SOFTCAP_FP32)):
        bound = match_body(pattern, stmts)
        if bound is not None and bound["l"] == logits:
            return op, expr_binding(bound, "cap")
    return None


def _tested_not_none(test: ast.expr) -> str | None:
    """``X`` for a test ``X is not None``, else None."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.IsNot)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return dotted(test.left)
    return None


def _guarded_softcap(stmt: ast.If, logits: str) -> tuple[str, str] | None:
    """``if <cap> is not None:`` around the three softcapping statements, with the same cap."""
    tested = _tested_not_none(stmt.test)
    if tested is None:
        return None
    cap = _softcap(stmt.body, logits) if len(stmt.body) == 3 else None
    return cap if cap is not None and cap[1] == tested else None


def _aliased_softcap(stmts: list[ast.stmt], logits: str) -> tuple[str, str] | None:
    """``cap = <expr>`` and then ``if cap is not None:`` around the softcapping statements (PaliGemma's
    ``getattr(self.config.get_text_config(), "final_logit_softcapping", None)``): the step, capped by ``<expr>``."""
    if len(stmts) < 2 or not isinstance(stmts[1], ast.If) or stmts[1].orelse:
        return None
    first = stmts[0]
    if not (
        isinstance(first, ast.Assign)
        and len(first.targets) == 1
        and isinstance(first.targets[0], ast.Name)
        and first.targets[0].id != logits
    ):
        return None
    cap = _guarded_softcap(stmts[1], logits)
    if cap is None or cap[1] != first.targets[0].id:
        return None
    return cap[0], ast.unparse(first.value)


def _scale(stmt: ast.stmt, logits: str) -> tuple[str, str] | None:
    ops = {ast.Div: "scale_div", ast.Mult: "scale_mul"}
    if isinstance(stmt, ast.AugAssign) and dotted(stmt.target) == logits and type(stmt.op) in ops:
        return ops[type(stmt.op)], dotted(stmt.value)
    if (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and dotted(stmt.targets[0]) == logits
        and isinstance(stmt.value, ast.BinOp)
        and type(stmt.value.op) in ops
        and dotted(stmt.value.left) == logits
        and not any(isinstance(n, ast.Name) and n.id == logits for n in ast.walk(stmt.value.right))
    ):
        return ops[type(stmt.value.op)], dotted(stmt.value.right)
    return None


def _guarded_scale(stmt: ast.stmt, logits: str) -> tuple[str, str] | None:
    """``if <scale> is not None:`` around one scaling statement by the same scale (cohere_compass's
    ``logit_scale``): the step, by ``(<scale> if <scale> is not None else 1)``, which is exact where it is None."""
    if not (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1):
        return None
    factor = _tested_not_none(stmt.test)
    scale = _scale(stmt.body[0], logits) if factor is not None else None
    if scale is None or scale[1] != factor:
        return None
    return scale[0], f"({factor} if {factor} is not None else 1)"


def _loss_statement_problem(stmt: ast.stmt, logits: str) -> str | None:
    """The statement holding the loss call must be ``[if labels is not None:] loss = self.loss_function(...)``."""
    inner = stmt
    if isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1:
        inner = stmt.body[0]
    if (
        isinstance(inner, ast.Assign)
        and len(inner.targets) == 1
        and isinstance(inner.targets[0], ast.Name)
        and isinstance(inner.value, ast.Call)
        and _is_loss_call(inner.value)
    ):
        call = inner.value
        logits_arg = next(
            (kw.value for kw in call.keywords if kw.arg == "logits"), call.args[0] if call.args else None
        )
        if logits_arg is None or dotted(logits_arg) != logits:
            return f"loss_function (line {call.lineno}) is not passed {logits} itself"
        return None
    return f"the loss statement (line {stmt.lineno}) does more than `loss = self.loss_function(...)`"


def _output_class(forward: ast.FunctionDef) -> str | None:
    for node in ast.walk(forward):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
            name = called_name(node.value)
            if name and name[0].isupper():
                return name
    return None


def _lm_head_bias(source: ModelSource, cls: str, attr: str = "lm_head") -> bool:
    for value in source.init_assigns(cls).get(attr, []):
        if isinstance(value, ast.Call) and called_name(value) == "Linear":
            for kw in value.keywords:
                if kw.arg == "bias":
                    return not (isinstance(kw.value, ast.Constant) and kw.value.value is False)
            return len(value.args) < 3 or not (
                isinstance(value.args[2], ast.Constant) and value.args[2].value is False
            )
    return False


def _aux_loss_function(source: ModelSource, forward: ast.FunctionDef) -> str | None:
    for node in ast.walk(forward):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "aux_loss" for t in node.targets)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
        ):
            return node.value.func.id
    return None


def read_multipliers(
    source: ModelSource, base_model: str | None, decoder_layer: str | None, causal_lm: CausalLmInfo | None
) -> Multipliers:
    """Scalars around the decoder: embedding scale, residual multiplier, logits scaling and softcapping."""
    embedding = _embedding_multiplier(source, base_model) if base_model else None
    residual = _residual_multiplier(source, decoder_layer) if decoder_layer else None
    logits = None
    softcap = False
    if causal_lm is not None:
        for op, expr in causal_lm.postprocess:
            if op in ("softcap", "softcap_fp32"):
                softcap = True
            elif op in ("scale_div", "scale_mul") and logits is None:
                logits = expr
    return Multipliers(embedding=embedding, residual=residual, logits=logits, final_logit_softcapping=softcap)


def _embedding_multiplier(source: ModelSource, base_model: str) -> str | None:
    for value in source.init_assigns(base_model).get("embed_tokens", []):
        if isinstance(value, ast.Call):
            for kw in value.keywords:
                if kw.arg in ("embed_scale", "scale"):
                    return dotted(kw.value)
    found = source.method(base_model, "forward")
    if found is None:
        return None
    local: dict[str, str] = {}
    for node in ast.walk(found[0]):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        target = node.targets[0].id
        value = node.value
        # gemma2-style `normalizer = torch.tensor(<scale>, dtype=...)`.
        if isinstance(value, ast.Call) and dotted(value.func) == "torch.tensor" and value.args:
            local[target] = dotted(value.args[0])
        if (
            target in ("inputs_embeds", "hidden_states")
            and isinstance(value, ast.BinOp)
            and isinstance(value.op, ast.Mult)
            and dotted(value.left) in ("inputs_embeds", "hidden_states")
        ):
            right = dotted(value.right)
            return local.get(right, right)
    return None


def _residual_multiplier(source: ModelSource, decoder_layer: str) -> str | None:
    found = source.method(decoder_layer, "forward")
    if found is None:
        return None
    for node in ast.walk(found[0]):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add)
            and dotted(node.left) == "residual"
            and isinstance(node.right, ast.BinOp)
            and isinstance(node.right.op, ast.Mult)
        ):
            return dotted(node.right.right)
    return None
