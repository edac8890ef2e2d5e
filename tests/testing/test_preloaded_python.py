"""A preloaded interpreter runs code as ``python -c`` would, with torch imported and nothing of modelgraft."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from modelgraft.models.testing.preloaded_python import PreloadedInterpreter, run_code

_REPORT = """
import json, os, sys
print(json.dumps({
    "name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
    "torch": "torch" in sys.modules, "modelgraft": sorted(m for m in sys.modules if m.startswith("modelgraft")),
    "variable": os.environ.get("PRELOADED_TEST_VARIABLE"),
}))
"""


def test_code_runs_as_main_in_the_given_directory_with_torch_and_without_modelgraft(tmp_path: Path) -> None:
    done = run_code(_REPORT, cwd=tmp_path, env={"PRELOADED_TEST_VARIABLE": "set"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "name": "__main__",
        "argv": ["-c"],
        "path0": "",
        "cwd": str(tmp_path),
        "torch": True,
        "modelgraft": [],
        "variable": "set",
    }
    assert done.args == [sys.executable, "-c", _REPORT]


def test_a_failing_script_reports_its_exit_status_and_traceback(tmp_path: Path) -> None:
    done = run_code("import sys\nprint('before')\nraise SystemExit(3)", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (3, "before\n")
    raised = run_code("raise ValueError('from the script')", cwd=tmp_path)
    assert raised.returncode == 1 and "ValueError: from the script" in raised.stderr


def test_a_script_finds_modules_in_its_directory_first(tmp_path: Path) -> None:
    (tmp_path / "local_module_of_the_test.py").write_text("WHERE = 'here'\n", encoding="utf-8")
    done = run_code("import local_module_of_the_test as m\nprint(m.WHERE)", cwd=tmp_path)
    assert done.stdout == "here\n", done.stderr


def test_the_preloaded_modules_are_left_out_of_the_childs_garbage_collection(tmp_path: Path) -> None:
    done = run_code("import gc\nprint(gc.get_freeze_count())", cwd=tmp_path)
    assert int(done.stdout) > 100_000, done.stderr  # torch and transformers alone make several hundred thousand


_FIRST_COMPILE = """
import sys, torch
before = set(sys.modules)
step = torch.compile(lambda x: (x.sin() * 2).sum(), backend="aot_eager", fullgraph=True)
step(torch.randn(8, requires_grad=True)).backward()
print(sorted(m for m in set(sys.modules) - before if m.startswith(("torch._inductor", "torch._functorch", "networkx"))))
"""


def test_a_childs_first_compile_finds_what_it_imports_preloaded(tmp_path: Path) -> None:
    """Every scaffold's suite compiles its first decoder layers; what a first compile imports comes with the fork.

    The modules are torch 2.13's: a torch version that imports others lazily lists them here (add them to
    ``PRELOAD``)."""
    done = run_code(_FIRST_COMPILE, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


def test_a_kill_asked_while_the_server_forks_ends_the_run_once_forked(tmp_path: Path) -> None:
    """A caller that stops its runs (scaffold-survey on Ctrl-C) may ask before the run knows its child's pid."""
    (tmp_path / "sleeper.py").write_text("import time\ntime.sleep(30)\n", encoding="utf-8")
    # Nothing preloaded: the kill is what is tested, not the imports.
    interpreter = PreloadedInterpreter({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, preload=())
    replies = interpreter._reply

    def reply_then_kill(timeout: float | None) -> dict[str, int] | None:
        answer = replies(timeout)
        if answer is not None and "pid" in answer:  # the fork's reply, before the run has read it
            interpreter.kill_running()
        return answer

    interpreter._reply = reply_then_kill  # type: ignore[method-assign]
    try:
        start = time.monotonic()
        done = interpreter.run_module("sleeper", cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")}, timeout=60)
        assert done.returncode == -9 and time.monotonic() - start < 20
    finally:
        interpreter.close()
