"""Jinja-templated override snippets shared by many models (``<name>.py.j2`` files here).

A snippet renders to Python source defining exactly one function or class,
which is then applied like a hand-written patch, under the same checks.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.errors import SnippetError
from modelgraft.generator.upstream.member import UpstreamMember

if TYPE_CHECKING:
    import jinja2

SNIPPET_DIR = Path(__file__).resolve().parent
SUFFIX = ".py.j2"


def available() -> list[str]:
    return sorted(p.name[: -len(SUFFIX)] for p in SNIPPET_DIR.glob(f"*{SUFFIX}"))


def environment() -> jinja2.Environment:
    """A Jinja environment over the snippet folder as it is now (a run's context keeps one per run)."""
    import jinja2  # imported on first use: plain configs and --check on a warm cache never need it

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(SNIPPET_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.globals["fail"] = _fail
    return env


# Per environment (a run's context holds one), by template name and text: a zoo-wide run renders the
# same few templates hundreds of times, and needs each one's includes besides its code. Both come from
# one parse; finding the includes by parsing the template again on every render cost a fifth of
# planning (docs/performance.md, "Generator: whole processes"). An edited template is another text,
# compiled afresh.
_COMPILED: weakref.WeakKeyDictionary[
    jinja2.Environment, dict[tuple[str, str], tuple[jinja2.Template, tuple[str, ...]]]
] = weakref.WeakKeyDictionary()


def _compiled(templates: jinja2.Environment, name: str, text: str) -> tuple[jinja2.Template, tuple[str, ...]]:
    """Template ``name`` with source ``text``, compiled in ``templates``, and the names of the templates it
    includes (``{% include %}`` with a constant name), sorted; what ``templates.get_template(name)``
    would compile, from the same single parse as the includes."""
    import jinja2.meta

    memo = _COMPILED.setdefault(templates, {})
    found = memo.get((name, text))
    if found is None:
        filename = str(SNIPPET_DIR / name)
        tree = templates.parse(text, name, filename)
        included = tuple(sorted(n for n in jinja2.meta.find_referenced_templates(tree) if n))
        code = templates.compile(tree, name, filename)
        template = templates.template_class.from_code(templates, code, templates.make_globals(None))
        found = memo[(name, text)] = (template, included)
    return found


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
        template, included = _compiled(templates, path.name, path.read_text(encoding="utf-8"))
        text = template.render(**ref.variables, upstream=upstream)
    except SnippetError as exc:
        raise SnippetError(f"snippet {ref.name!r}: {exc.cause}") from exc
    except jinja2.UndefinedError as exc:
        raise SnippetError(f"snippet {ref.name!r} needs a variable that was not given: {exc.message}") from exc
    except jinja2.TemplateError as exc:
        raise SnippetError(f"snippet {ref.name!r} cannot be rendered: {exc}") from exc
    # A template that includes another (an Omni thinker's forward includes the loss head's) depends on both.
    return text, (path, *(snippet_path(name.removesuffix(SUFFIX)) for name in included))
