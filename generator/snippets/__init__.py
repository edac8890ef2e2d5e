"""Jinja-templated override snippets shared by many models (``<name>.py.j2`` files here).

A snippet renders to Python source defining exactly one function or class,
which is then applied like a hand-written patch, under the same checks.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.errors import SnippetError
from modelgraft.generator.upstream.member import UpstreamMember

if TYPE_CHECKING:
    import jinja2

SNIPPET_DIR = Path(__file__).resolve().parent
SUFFIX = ".py.j2"


def available() -> list[str]:
    return sorted(p.name[: -len(SUFFIX)] for p in SNIPPET_DIR.glob(f"*{SUFFIX}"))


#: How snippets are written: the one Jinja syntax of :func:`environment` and :func:`_included`.
_SYNTAX: dict[str, Any] = {"keep_trailing_newline": True, "trim_blocks": True, "lstrip_blocks": True}


def environment() -> jinja2.Environment:
    """A Jinja environment over the snippet folder as it is now (a run's context keeps one per run)."""
    import jinja2  # imported on first use: plain configs and --check on a warm cache never need it

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(SNIPPET_DIR)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        **_SYNTAX,
    )
    env.globals["fail"] = _fail
    return env


# A pure function of the template's text, memoised per process: a zoo-wide run renders the same few
# templates hundreds of times, and parsing one again on every render to find what it includes cost a
# fifth of planning (docs/performance.md, "Generator: whole processes"). An edited template is
# another text, parsed afresh.
@lru_cache(maxsize=256)
def _included(text: str) -> tuple[str, ...]:
    """The names of the templates ``text`` includes, sorted (``{% include %}`` with a constant name)."""
    import jinja2
    import jinja2.meta

    tree = jinja2.Environment(**_SYNTAX).parse(text)
    return tuple(sorted(name for name in jinja2.meta.find_referenced_templates(tree) if name))


def _fail(message: str) -> None:
    """``{{ fail("...") }}`` in a template: reject a variable value with a clear message."""
    raise SnippetError(message)


def snippet_path(name: str) -> Path:
    return SNIPPET_DIR / f"{name}{SUFFIX}"


def render(
    ref: SnippetRef, upstream: UpstreamMember | None, templates: jinja2.Environment
) -> tuple[str, tuple[Path, ...]]:
    """Rendered source of ``ref`` (from ``templates``, see :func:`environment`) and its template file.

    ``upstream`` is the member the snippet patches (None for an added method): templates read its
    parameter names, header, docstring and body as the ``upstream`` variable, so a guard can keep
    upstream's own code for the eager path.
    """
    import jinja2

    path = snippet_path(ref.name)
    if not path.is_file():
        raise SnippetError(f"no snippet named {ref.name!r} (available: {', '.join(available()) or 'none'})")
    try:
        text = templates.get_template(path.name).render(**ref.variables, upstream=upstream)
    except SnippetError as exc:
        raise SnippetError(f"snippet {ref.name!r}: {exc.cause}") from exc
    except jinja2.UndefinedError as exc:
        raise SnippetError(f"snippet {ref.name!r} needs a variable that was not given: {exc.message}") from exc
    except jinja2.TemplateError as exc:
        raise SnippetError(f"snippet {ref.name!r} cannot be rendered: {exc}") from exc
    # A template that includes another (an Omni thinker's forward includes the loss head's) depends on both.
    included = _included(path.read_text(encoding="utf-8"))
    return text, (path, *(snippet_path(name.removesuffix(SUFFIX)) for name in included))
