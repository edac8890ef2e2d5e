"""Copier's environments share compiled Jinja code only where the code would be the same.

``modelgraft.scaffold.jinja_compile_cache`` keys compiled code on the source and on the compile-time settings
of the environment; these tests build plain Jinja environments as Copier does (one per render) and count
the compiles that reach Jinja.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jinja2 import Environment, FileSystemLoader, pass_context
from jinja2.sandbox import SandboxedEnvironment

from modelgraft.scaffold import jinja_compile_cache
from modelgraft.scaffold.jinja_compile_cache import share_compiled_code


@pytest.fixture(autouse=True)
def compiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every source Jinja itself compiles, with the cache empty at the start."""
    monkeypatch.setattr(jinja_compile_cache, "_COMPILED", {})
    monkeypatch.setattr(jinja_compile_cache, "_PASSING", {})
    compiled: list[str] = []
    real = Environment.compile

    def counting(self: Environment, source: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.append(source)
        return real(self, source, *args, **kwargs)

    monkeypatch.setattr(Environment, "compile", counting)
    yield compiled


def _shared(**options: Any) -> SandboxedEnvironment:
    environment = SandboxedEnvironment(**options)
    share_compiled_code(environment)
    return environment


def test_environments_with_the_same_settings_compile_a_source_once(compiles: list[str]) -> None:
    first, second = _shared(), _shared()
    assert first.from_string("{{ a + 1 }}").render(a=1) == "2"
    assert second.from_string("{{ a + 1 }}").render(a=2) == "3"
    assert compiles == ["{{ a + 1 }}"]


def test_another_syntax_compiles_the_source_again(compiles: list[str]) -> None:
    source = "[[ a ]]{{ a }}"
    assert _shared().from_string(source).render(a=1) == "[[ a ]]1"
    assert _shared(variable_start_string="[[", variable_end_string="]]").from_string(source).render(a=1) == "1{{ a }}"
    assert compiles == [source, source]


def test_a_filter_passed_the_context_in_one_environment_only_compiles_apart(compiles: list[str]) -> None:
    plain, with_context = _shared(), _shared()
    plain.filters["who"] = lambda value: f"plain {value}"
    with_context.filters["who"] = pass_context(lambda context, value: f"{context['name']} {value}")
    assert plain.from_string("{{ 1 | who }}").render(name="x") == "plain 1"
    assert with_context.from_string("{{ 1 | who }}").render(name="x") == "x 1"
    assert len(compiles) == 2


def test_what_each_filter_is_passed_is_read_once_per_set_of_filters(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[object] = []
    real = jinja_compile_cache._PassArg.from_obj

    def counting(function: object) -> object:
        read.append(function)
        return real(function)

    monkeypatch.setattr(jinja_compile_cache._PassArg, "from_obj", counting)
    first, second = _shared(), _shared()
    for environment, source in ((first, "{{ 1 }}"), (first, "{{ 2 }}"), (second, "{{ 3 }}")):
        environment.from_string(source).render()
    assert len(read) == len(first.filters) + len(first.tests)


def test_an_environment_left_alone_compiles_every_time(compiles: list[str]) -> None:
    shared, alone = _shared(), SandboxedEnvironment()
    for environment in (shared, shared, alone, alone):
        environment.from_string("{{ 1 }}").render()
    assert len(compiles) == 3


def _file_environment(folder: Path) -> SandboxedEnvironment:
    environment = SandboxedEnvironment(loader=FileSystemLoader(folder))
    share_compiled_code(environment)
    return environment


def _same_file_in(tmp_path: Path, *clones: str, text: str) -> list[Path]:
    """The same template file in several folders, as each of Copier's clones of a template source holds it."""
    for clone in clones:
        (tmp_path / clone).mkdir()
        (tmp_path / clone / "note.jinja").write_text(text, encoding="utf-8")
    return [tmp_path / clone for clone in clones]


def test_the_same_file_in_another_folder_is_compiled_once(compiles: list[str], tmp_path: Path) -> None:
    first, second = _same_file_in(tmp_path, "first", "second", text="{{ model }} note")
    assert _file_environment(first).get_template("note.jinja").render(model="a") == "a note"
    assert _file_environment(second).get_template("note.jinja").render(model="b") == "b note"
    assert compiles == ["{{ model }} note"]


def test_a_template_compiled_for_another_folder_names_its_own_file(tmp_path: Path) -> None:
    first, second = _same_file_in(
        tmp_path, "first", "second", text="{% macro m() %}{{ 1 // x }}{% endmacro %}{{ m() }}"
    )
    _file_environment(first).get_template("note.jinja")
    template = _file_environment(second).get_template("note.jinja")
    assert template.filename == str(second / "note.jinja")
    with pytest.raises(ZeroDivisionError) as raised:
        template.render(x=0)
    files = {entry.filename for entry in traceback.extract_tb(raised.value.__traceback__)}
    assert str(second / "note.jinja") in files and str(first / "note.jinja") not in files
