"""Snippet failures are config errors: a missing variable, a rendering that is not Python, an unknown snippet.

Templates live in a private snippet folder (the ``snippet_dir`` fixture), so
these tests neither depend on nor touch generator/snippets/.
"""

from __future__ import annotations

from .projects import Project, config_source
from .test_checks import names, reject

SCALED = """\
{#
A forward that scales by a factor.
  factor: the scale
#}
from math import prod


def forward(self, x):
    # {{ prefix }} scaled forward
    return prod([x, {{ factor }}]) * self.scale
"""


def write_snippet(folder, name: str, text: str) -> None:
    (folder / f"{name}.py.j2").write_text(text, encoding="utf-8")


def test_a_snippet_is_rendered_and_applied_like_a_patch(project: Project, snippet_dir):
    write_snippet(snippet_dir, "scaled_forward", SCALED)

    text = project.generate('config.apply_snippet("scaled_forward", "ToyMLP.forward", prefix="Toy", factor=3)\n')

    assert (
        "    # [PATCHED METHOD] ToyMLP.forward: snippet scaled_forward\n"
        "    def forward(self, x):\n"
        "        # Toy scaled forward\n"
        "        return prod([x, 3]) * self.scale\n"
    ) in text
    assert "\nfrom math import prod\n" in text
    assert "#   - override_method ToyMLP.forward: snippet scaled_forward" in text


def test_a_snippet_for_a_module_level_function_replaces_the_function(project: Project, snippet_dir):
    write_snippet(snippet_dir, "activation", "def toy_activation(x):\n    return x * {{ factor }}\n")

    text = project.generate('config.apply_snippet("activation", "toy_activation", factor=5)\n')

    assert (
        "# [PATCHED FUNCTION] toy_activation: snippet activation\ndef toy_activation(x):\n    return x * 5\n" in text
    )


def test_a_snippet_missing_a_variable_names_the_snippet_and_the_variable(project: Project, snippet_dir):
    write_snippet(snippet_dir, "scaled_forward", SCALED)

    result = reject(project, 'config.apply_snippet("scaled_forward", "ToyMLP.forward", prefix="Toy")\n')

    names(
        result,
        target=None,
        cause="snippet 'scaled_forward' needs a variable that was not given: 'factor' is undefined",
    )


def test_a_snippet_rendering_invalid_python_is_rejected(project: Project, snippet_dir):
    write_snippet(snippet_dir, "broken", "def forward(self, x):\n    return x *{{ factor }}\n")

    result = reject(project, 'config.apply_snippet("broken", "ToyMLP.forward", factor="")\n')

    names(result, target=None, cause="snippet 'broken' rendered to invalid Python")


def test_a_snippet_defining_two_members_is_rejected(project: Project, snippet_dir):
    write_snippet(snippet_dir, "two", "def forward(self, x):\n    return x\n\n\ndef other(self):\n    return 1\n")

    result = reject(project, 'config.apply_snippet("two", "ToyMLP.forward")\n')

    names(result, target=None, cause="must hold imports, then exactly one function or class")


def test_an_unknown_snippet_is_rejected_with_the_available_ones(project: Project, snippet_dir):
    write_snippet(snippet_dir, "scaled_forward", SCALED)

    result = reject(project, 'config.apply_snippet("scaled_fowrard", "ToyMLP.forward", prefix="Toy", factor=2)\n')

    names(result, target=None, cause="no snippet named 'scaled_fowrard' (available: scaled_forward)")


def test_a_snippet_can_reject_a_variable_value_with_fail(project: Project, snippet_dir):
    write_snippet(
        snippet_dir,
        "checked",
        '{% if factor < 0 %}{{ fail("factor must be positive, got " ~ factor) }}{% endif %}\ndef forward(self, x):\n    return x\n',
    )

    result = reject(project, 'config.apply_snippet("checked", "ToyMLP.forward", factor=-1)\n')

    names(result, target=None, cause="snippet 'checked': factor must be positive, got -1")


def test_a_snippet_error_names_the_patch_target(project: Project, snippet_dir):
    write_snippet(snippet_dir, "scaled_forward", SCALED)

    result = reject(project, 'config.apply_snippet("scaled_forward", "ToyMLP.forward", prefix="Toy")\n')

    names(result, target="ToyMLP.forward", cause="'factor' is undefined")


def test_snippet_patches_go_through_the_signature_check(project: Project, snippet_dir):
    write_snippet(snippet_dir, "wrong_signature", "def forward(self, y):\n    return y\n")

    result = reject(project, 'config.apply_snippet("wrong_signature", "ToyMLP.forward")\n')

    names(result, target="ToyMLP.forward", cause="missing upstream parameter x")


def test_the_snippet_folder_is_private_to_the_test(snippet_dir):
    from modelgraft.generator import snippets

    write_snippet(snippet_dir, "only_here", "def f():\n    return 1\n")

    assert snippets.available() == ["only_here"]


def test_snippet_errors_happen_at_generation_not_when_the_config_loads(project: Project, snippet_dir):
    write_snippet(snippet_dir, "scaled_forward", SCALED)
    project.config("toy", config_source('config.apply_snippet("scaled_forward", "ToyMLP.forward")\n'))

    listed = project.run(project.module("toy"), "--list")

    assert listed.code == 0
    assert "override_method   ToyMLP.forward  (snippet scaled_forward)" in listed.out


MODEL_FORWARD = """\
def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):
    return self.mlp.forward(input_ids)
"""


def test_a_snippet_keeps_the_upstream_decorators_by_default(project: Project, snippet_dir):
    write_snippet(snippet_dir, "model_forward", MODEL_FORWARD)

    text = project.generate('config.apply_snippet("model_forward", "ToyModel.forward")\n')

    assert "    @can_return_tuple\n    @auto_docstring\n    def forward(" in text


def test_a_snippet_can_drop_upstream_decorators(project: Project, snippet_dir):
    write_snippet(snippet_dir, "model_forward", MODEL_FORWARD)

    text = project.generate(
        'config.apply_snippet("model_forward", "ToyModel.forward", keep_decorators=("auto_docstring",))\n'
    )

    assert "    @can_return_tuple\n    def forward(" in text


def test_a_snippet_that_includes_another_depends_on_both_files_on_every_render(snippet_dir):
    from modelgraft.generator import snippets
    from modelgraft.generator.dsl.patches import SnippetRef

    write_snippet(snippet_dir, "head", "    return x * {{ factor }}\n")
    write_snippet(snippet_dir, "body", 'def forward(self, x):\n{% include "head.py.j2" %}')
    templates = snippets.environment()

    renders = [snippets.render(SnippetRef("body", {"factor": f}), None, templates) for f in (2, 3)]

    assert [text for text, _ in renders] == [
        "def forward(self, x):\n    return x * 2\n",
        "def forward(self, x):\n    return x * 3\n",
    ]
    assert [files for _, files in renders] == [(snippet_dir / "body.py.j2", snippet_dir / "head.py.j2")] * 2


def test_a_template_edited_between_renders_renders_its_new_text(snippet_dir):
    from modelgraft.generator import snippets
    from modelgraft.generator.dsl.patches import SnippetRef

    templates = snippets.environment()
    write_snippet(snippet_dir, "body", "def forward(self, x):\n    return x\n")
    first, _ = snippets.render(SnippetRef("body", {}), None, templates)
    write_snippet(snippet_dir, "body", "def forward(self, x):\n    return -x\n")

    second, _ = snippets.render(SnippetRef("body", {}), None, templates)

    assert (first, second) == ("def forward(self, x):\n    return x\n", "def forward(self, x):\n    return -x\n")
