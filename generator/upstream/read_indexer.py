"""The DeepSeek sparse attention (DSA) indexer of a modeling module: the class that picks, per query, the keys its
attention may read.

Its scoring, mask and top-k go behind the ``dsa_indexer`` slot (the ``dsa_indexer_guard`` snippet), where
sequence parallelism binds the kernel that scores a rank's queries against the whole sequence's keys
(docs/distributed.md). The MoE text recipe and the composed VLM recipe (an own text model's) both apply it.
"""

from __future__ import annotations

import ast

from modelgraft.generator.upstream.source import ModelSource, dotted

__all__ = ["read_dsa_indexer"]


def read_dsa_indexer(source: ModelSource) -> str | None:
    """The module's DeepSeek sparse attention indexer: the class whose forward takes ``hidden_states``,
    ``attention_mask`` and ``position_ids``, scores its queries against ``k.transpose`` and returns
    ``index_scores.topk`` (GLM-MoE-DSA's, DeepSeek-V3.2's, mistral_large4's text indexer; the shape of the
    ``dsa_indexer_guard`` snippet)."""
    for name in source.classes:
        found = source.method(name, "forward")
        if found is None or found[1] is not None:
            continue
        func = found[0]
        params = {arg.arg for arg in func.args.args}
        calls = {dotted(node.func) for node in ast.walk(func) if isinstance(node, ast.Call)}
        if {"hidden_states", "attention_mask", "position_ids"} <= params and {
            "k.transpose",
            "index_scores.topk",
        } <= calls:
            return name
    return None
