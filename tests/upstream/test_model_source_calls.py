"""The reader's call questions (``calls_in``, which classes only a branch instantiates) on small modules."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.source import ModelSource, calls_in

MODULE = textwrap.dedent(
    """
    class Dense: pass
    class Sparse: pass
    class Either: pass
    class Nested: pass
    class Block:
        def __init__(self, config):
            self.always = Dense()
            self.mlp = Sparse() if config.moe else Dense()
            if config.a:
                if config.b:
                    self.deep = Nested()
                else:
                    self.either = Either()
            self.again = Either()
    """
)


def _source(tmp_path: Path, module: str = MODULE) -> ModelSource:
    path = tmp_path / "modeling_toy.py"
    path.write_text(textwrap.dedent(module), encoding="utf-8")
    index = ModuleIndex.parse("toy.modeling_toy", path)
    return ModelSource(model="toy", index=index, sources=UpstreamSources())


def test_calls_in_gives_every_call_in_source_order_and_a_fresh_list_each_time() -> None:
    tree = ast.parse("f(g(1), h())\nk()\n")
    names = [call.func.id for call in calls_in(tree)]  # type: ignore[attr-defined]
    assert names == ["f", "g", "h", "k"]
    calls_in(tree).clear()
    assert len(calls_in(tree)) == 4


def test_a_class_instantiated_only_in_branches_is_conditional_and_one_also_built_outside_is_not(
    tmp_path: Path,
) -> None:
    source = _source(tmp_path)
    assert source.instantiated == ("Dense", "Either", "Nested", "Sparse")
    assert source.conditionally_instantiated == ("Nested", "Sparse")


def test_a_branch_at_class_level_counts_and_a_decorator_is_no_branch(tmp_path: Path) -> None:
    source = _source(
        tmp_path,
        """
        class Gated: pass
        class Listed: pass
        class Picked: pass
        def register(value): return lambda function: function
        class Model:
            def plain(self):
                return 2
            if FLAG:
                def make(self):
                    return Gated()
            @register(Listed())
            def listed(self):
                return 1
            def pick(self, flag):
                return Picked() if flag else None
        """,
    )
    assert source.instantiated == ("Gated", "Listed", "Picked")
    assert source.conditionally_instantiated == ("Gated", "Picked")


def test_a_sub_model_built_from_its_sub_config_is_instantiated(tmp_path: Path) -> None:
    """``Tower._from_config(config.vision_config)`` is how transformers builds a VLM's towers."""
    source = _source(
        tmp_path,
        """
        class Tower: pass
        class Unused: pass
        class Model:
            def __init__(self, config):
                self.visual = Tower._from_config(config.vision_config)
                self.other = Unused.from_pretrained("a/b")
        """,
    )
    assert source.instantiated == ("Tower",)
