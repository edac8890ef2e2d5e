"""Throwaway generator projects on disk: a fake upstream package, a zoo of configs, a CLI runner.

In the spirit of Copier's test helpers: real files, real imports, real ruff,
no mocks.  A :class:`Project` is a folder with a ``pyproject.toml`` whose
``[tool.patchgen]`` discovers configs under ``zoo/``, next to a "site" folder
that holds ``toyupstream``, a small package laid out like transformers
(relative imports, ``@auto_docstring``, output dataclasses, a base class in
another module, a dense/MoE sibling pair) with a ``dist-info`` so its version
is readable the way transformers' is.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Top-level packages a project may create; purged from sys.modules between in-process runs.
PROJECT_PACKAGES = ("zoo", "zoo2", "zoo_ext", "toyupstream", "_patchgen_config")

TOY_MODULE = "toyupstream.models.toy.modeling_toy"
TOY_MOE_MODULE = "toyupstream.models.toy_moe.modeling_toy_moe"

LICENSE = """\
# Copyright 2025 The Toy Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# TOY-LICENSE-MARKER: this block must survive generation verbatim.
"""

# The upstream files are written the way ruff formats them, so substrings of
# upstream code can be looked for in the normalized output as they are here.
UPSTREAM_FILES: dict[str, str] = {
    "toyupstream/__init__.py": '"""A fake transformers: laid out like it, tiny, importable without torch."""\n',
    "toyupstream/utils/__init__.py": '''\
        class ModelOutput:
            """Base of every output dataclass."""


        def auto_docstring(obj=None, **kwargs):
            if obj is None:
                return lambda inner: inner
            return obj


        def can_return_tuple(fn):
            return fn


        def is_fast_path_available():
            return False


        def local_helper(x):
            return x
        ''',
    "toyupstream/modeling_utils.py": """\
        class PreTrainedModel:
            def __init__(self, config):
                self.config = config

            def post_init(self):
                self.initialized = True
        """,
    "toyupstream/modeling_layers.py": """\
        class GenericForSequenceClassification:
            def forward(self, input_ids=None, labels=None, **kwargs):
                return ("generic", input_ids, labels)
        """,
    "toyupstream/models/__init__.py": "",
    "toyupstream/models/toy/__init__.py": "",
    "toyupstream/models/toy/configuration_toy.py": """\
        class ToyConfig:
            model_type = "toy"

            def __init__(self, hidden_size=4):
                self.hidden_size = hidden_size
        """,
    "toyupstream/models/toy/modeling_toy.py": LICENSE
    + textwrap.dedent(
        '''\
        import math
        from dataclasses import dataclass

        from ...modeling_layers import GenericForSequenceClassification
        from ...modeling_utils import PreTrainedModel
        from ...utils import ModelOutput, auto_docstring, can_return_tuple, is_fast_path_available
        from .configuration_toy import ToyConfig

        # A module-level if block (conditional definition).
        if is_fast_path_available():
            FAST_PATH = True
        else:
            FAST_PATH = False

        try:
            from math import tau as TAU
        except ImportError:  # TOY-TRY-COMMENT
            TAU = 2 * math.pi

        DEFAULT_SCALE: float = 0.5

        TOY_REGISTRY = {}
        TOY_REGISTRY.setdefault("toy", "ToyModel")


        def toy_activation(x):
            # TOY-ACTIVATION-COMMENT: upstream comment inside a function
            return x * 2


        def toy_scale(x, factor=2.0):
            """Scale ``x`` by ``factor``."""
            return x * factor * TAU / TAU


        def talker_only_fn(x):
            return x + 1


        def shared_helper(x):
            return x - 1


        @dataclass
        @auto_docstring
        class ToyModelOutput(ModelOutput):
            last_hidden_state: list | None = None
            hidden_states: tuple | None = None


        class ToyMLP:
            def __init__(self, config):
                self.config = config
                self.scale = DEFAULT_SCALE

            def forward(self, x):
                # TOY-MLP-COMMENT: upstream comment inside a method
                return toy_activation(x) * self.scale

            def extra_repr(self):
                return f"scale={self.scale}"


        class ToyTalkerBlock:
            def __call__(self, x):
                return talker_only_fn(shared_helper(x))


        class ToyTalker:
            def __init__(self, config):
                self.block = ToyTalkerBlock()

            def forward(self, x):
                return self.block(x)


        @auto_docstring
        class ToyPreTrainedModel(PreTrainedModel):
            config_class = ToyConfig
            base_model_prefix = "model"


        @auto_docstring
        class ToyModel(ToyPreTrainedModel):
            def __init__(self, config):
                super().__init__(config)
                self.mlp = ToyMLP(config)
                self.post_init()

            @can_return_tuple
            @auto_docstring
            def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):
                r"""
                output_hidden_states (`bool`, *optional*):
                    Whether to return the hidden states.
                """
                hidden = self.mlp.forward(input_ids)
                return ToyModelOutput(last_hidden_state=hidden, hidden_states=(hidden,) if output_hidden_states else None)

            def local_import(self, x):
                from ...utils import local_helper  # TOY-LOCAL-IMPORT

                return local_helper(x)


        class ToyForSequenceClassification(GenericForSequenceClassification, ToyPreTrainedModel):
            pass


        class ToyForTokenClassification(ToyPreTrainedModel): ...


        class ToyForCausalLM(ToyPreTrainedModel):
            def __init__(self, config):
                super().__init__(config)
                self.model = ToyModel(config)

            def forward(self, input_ids=None, labels=None):
                out = self.model.forward(input_ids)
                return shared_helper(out.last_hidden_state)


        __all__ = ["ToyForCausalLM", "ToyForSequenceClassification", "ToyModel", "ToyPreTrainedModel", "ToyTalker"]
        '''
    ),
    "toyupstream/models/toy_moe/__init__.py": "",
    "toyupstream/models/toy_moe/configuration_toy_moe.py": """\
        class ToyMoeConfig:
            model_type = "toy_moe"
        """,
    "toyupstream/models/toy_moe/modeling_toy_moe.py": """\
        from dataclasses import dataclass

        from ...utils import ModelOutput, auto_docstring
        from .configuration_toy_moe import ToyMoeConfig


        @dataclass
        class ToyMoeModelOutput(ModelOutput):
            last_hidden_state: list | None = None
            hidden_states: tuple | None = None
            router_logits: tuple | None = None


        class ToyMoeMLP:
            def __init__(self, config):
                self.config = config
                self.scale = 1.0

            def forward(self, x):
                return x * self.scale


        @auto_docstring
        class ToyMoeModel:
            config_class = ToyMoeConfig

            def __init__(self, config):
                self.mlp = ToyMoeMLP(config)

            def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):
                hidden = self.mlp.forward(input_ids)
                return ToyMoeModelOutput(last_hidden_state=hidden, router_logits=(hidden,))


        __all__ = ["ToyMoeModel"]
        """,
    "toyupstream-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: toyupstream\nVersion: 1.0\n",
}

PYPROJECT = """\
[project]
name = "toyzoo"
version = "0"

[tool.patchgen]
roots = {roots}
cache_dir = ".patchgen_cache"
"""


@dataclass(frozen=True)
class Result:
    """What one run of the CLI said and returned."""

    code: int
    out: str
    err: str


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative posix path -> bytes), caches excluded."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def fresh_process_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next in-process CLI run import the project's configs anew, as a new process would.

    Run state (parsed sources, caches, settings) lives in the run's ``RunContext``; what a process
    keeps across runs is only its imported modules.
    """
    for name in [m for m in sys.modules if m.split(".")[0] in PROJECT_PACKAGES]:
        del sys.modules[name]
    importlib.invalidate_caches()


class Project:
    """A generator project in a temp folder, driven through ``modelgraft.generator.cli``."""

    def __init__(
        self, root: Path, site: Path, monkeypatch: pytest.MonkeyPatch, roots: tuple[str, ...] = ("zoo",)
    ) -> None:
        self.root = root
        self.site = site
        self.monkeypatch = monkeypatch
        root.mkdir(parents=True, exist_ok=True)
        # The project's own packages import each other (a config reusing a sibling's patch), as they would
        # once the project is installed; patchgen itself adds nothing to sys.path.
        monkeypatch.syspath_prepend(str(root))
        self.set_roots(*roots)

    # -- building ---------------------------------------------------------------------------
    def set_roots(self, *roots: str) -> None:
        roots_toml = "[" + ", ".join(f'"{r}"' for r in roots) + "]"
        (self.root / "pyproject.toml").write_text(PYPROJECT.format(roots=roots_toml), encoding="utf-8")

    def write(self, rel: str, text: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    def config(self, model: str, body: str, *, backend: str = "gpu", root: str = "zoo") -> Path:
        """Write ``<root>/<model>/<model>_<backend>_patch_gen_config.py`` (packages included)."""
        for package in (root, f"{root}/{model}"):
            init = self.root / package / "__init__.py"
            if not init.exists():
                self.write(f"{package}/__init__.py", "")
        return self.write(f"{root}/{model}/{model}_{backend}_patch_gen_config.py", body)

    def module(self, model: str, *, backend: str = "gpu", root: str = "zoo") -> str:
        return f"{root}.{model}.{model}_{backend}_patch_gen_config"

    def output(self, model: str, *, backend: str = "gpu", root: str = "zoo", suffix: str = ".py") -> Path:
        return self.root / root / model / "generated" / f"patched_modeling_{model}_{backend}{suffix}"

    def generated(self, model: str, *, backend: str = "gpu", root: str = "zoo") -> str:
        return self.output(model, backend=backend, root=root).read_text(encoding="utf-8")

    def snapshot(self) -> dict[str, bytes]:
        return snapshot(self.root)

    def generate(self, body: str, *, model: str = "toy", source_module: str = TOY_MODULE, header: str = "") -> str:
        """Write a ``config`` for ``model`` with ``body``, generate it, return the output text."""
        target = f"patched_modeling_{model}_gpu.py"
        self.config(model, config_source(body, source_module=source_module, target=target, header=header))
        result = self.run(self.module(model))
        assert result.code == 0, result.err
        return self.generated(model)

    # -- running ----------------------------------------------------------------------------
    def run(self, *argv: str, cwd: Path | None = None) -> Result:
        """``patchgen *argv`` in-process, as a fresh process would run it."""
        from modelgraft.generator.cli import main

        return self._in_process(main, list(argv), cwd)

    def generate_all(self, *argv: str) -> Result:
        """``generate-all *argv`` in-process."""
        from modelgraft.generator.cli import generate_all

        return self._in_process(generate_all, list(argv), None)

    def _in_process(self, entry, argv: list[str], cwd: Path | None) -> Result:
        fresh_process_state(self.monkeypatch)
        self.monkeypatch.chdir(cwd or self.root)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = entry(argv)
        fresh_process_state(self.monkeypatch)
        return Result(code, out.getvalue(), err.getvalue())

    def run_subprocess(
        self, *argv: str, code: str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> Result:
        """``python -m modelgraft.generator *argv`` (or ``python -c code``) in a real process."""
        command = (
            [sys.executable, "-c", code] if code is not None else [sys.executable, "-m", "modelgraft.generator", *argv]
        )
        return run_python(command, cwd=cwd or self.root, pythonpath=[self.root, self.site], env=env)


def run_python(command: list[str], *, cwd: Path, pythonpath: list[Path], env: dict[str, str] | None = None) -> Result:
    full_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    full_env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    full_env.update(env or {})
    proc = subprocess.run(command, check=False, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def write_toy_upstream(site: Path) -> None:
    for rel, text in UPSTREAM_FILES.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def config_source(
    body: str, *, source_module: str = TOY_MODULE, target: str = "patched_modeling_toy_gpu.py", header: str = ""
) -> str:
    """A config module: ``config = PatchConfig(...)`` followed by ``body`` (dedented)."""
    return (
        "from modelgraft.generator import PatchConfig, create_patch_from_external\n"
        + textwrap.dedent(header)
        + f"\nconfig = PatchConfig({source_module!r}, {target!r}, description='toy config')\n\n"
        + textwrap.dedent(body)
    )


def section(text: str, start: str, end: str | None = None) -> str:
    """The part of ``text`` from the line containing ``start`` up to (excluding) the one containing ``end``."""
    begin = text.index(start)
    begin = text.rfind("\n", 0, begin) + 1
    if end is None:
        return text[begin:]
    stop = text.index(end, begin + len(start))
    return text[begin : text.rfind("\n", 0, stop) + 1]


def class_source(text: str, name: str) -> str:
    """Source of top-level class ``name`` in ``text`` (with its decorators and banner lines above)."""
    import ast

    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            while start > 1 and lines[start - 2].lstrip().startswith("#"):
                start -= 1
            return "".join(lines[start - 1 : node.end_lineno])
    raise AssertionError(f"{name} is not defined at the top level of the output")
