"""``python -m <module> ...`` or ``python -c <code>`` in a process that starts with torch and transformers imported.

Some tests run code of another tree: a new scaffold's own tests in a clone, a mutant's suite in a copy. They
need a process of their own, since ``modelgraft`` must be imported from that tree, and most of such a
process's time goes to importing torch and transformers (3 to 5 s on two busy cores), the same modules every
time. A server process imports them once and forks a child per run. The child takes the run's working
directory, environment and ``sys.path`` (the directory, then ``PYTHONPATH``, then the interpreter's own, as a
fresh ``python -m`` has it) and runs the module as ``__main__``; code runs as ``-c`` runs it (the current
directory first on the path, a ``__main__`` of its own). Nothing of ``modelgraft`` is imported before the
fork, so the child imports it from the tree it is given, and a test of what importing it changes sees an
interpreter where it never was. The preloaded objects are frozen out of garbage collection before the first
fork: otherwise a child's first full collection walks the whole inherited heap, which writes to (and so copies)
every page of it; with them frozen, a child's ``pytest --version`` took 0.35 s instead of 1.1 s.

The server is POSIX-only (``os.fork``); elsewhere :func:`run_module` starts a plain interpreter.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

#: What the server imports once, before any fork: the bulk of a test process's start. The ``torch._inductor`` and
#: ``torch._functorch`` modules are what a process's first ``torch.compile`` imports, aot_eager's included (dynamo's
#: backends, aot_autograd, most of inductor and networkx): 1.2 s of the first compile of every scaffold's suite,
#: which checks its first decoder layers compiled (torch 2.13's modules; a name a torch version lacks is skipped).
#: Importing them starts no thread and no process.
PRELOAD = (
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "torch._inductor.compile_fx",
    "torch._inductor.compiler_bisector",
    "torch._functorch._aot_autograd.subclass_codegen",
    "pytest",
)

_SERVER = r"""
import gc, json, os, runpy, sys, traceback
for _name in json.loads(sys.argv[1]):
    try:
        __import__(_name)
    except ImportError:  # not installed here (pytest outside the test extras): a child imports what it needs
        pass
_interpreter_path = [entry for entry in sys.path if entry]
gc.freeze()  # the preloaded heap is never garbage: a child's collections leave it alone, and so uncopied
for _line in sys.stdin:
    _request = json.loads(_line)
    _pid = os.fork()
    if _pid:
        print(json.dumps({"pid": _pid}), flush=True)
        _, _status = os.waitpid(_pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(_status)}), flush=True)
        continue
    os.setpgid(0, 0)
    _null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(_null, 0)
    for _fd, _path in ((1, _request["stdout"]), (2, _request["stderr"])):
        os.dup2(os.open(_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), _fd)
    os.chdir(_request["cwd"])
    os.environ.clear()
    os.environ.update(_request["env"])
    _extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    _code = 0
    try:
        if "code" in _request:  # python -c: the current directory first on the path, a __main__ of its own
            sys.path[:] = ["", *_extra, *_interpreter_path]
            sys.argv = ["-c", *_request["args"]]
            _main = type(sys)("__main__")
            sys.modules["__main__"] = _main
            exec(compile(_request["code"], "<string>", "exec"), _main.__dict__)
        else:
            sys.path[:] = [_request["cwd"], *_extra, *_interpreter_path]
            sys.argv = [_request["module"], *_request["args"]]
            runpy.run_module(_request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as _exit:
        _code = _exit.code
    except BaseException:
        traceback.print_exc()
        _code = 1
    raise SystemExit(_code)
"""


class PreloadedInterpreter:
    """One server process, its request pipe, and the lock that keeps one run at a time on it.

    :func:`run_module` and :func:`run_code` share one per test process. A caller running several at once (the
    scaffold survey, one per worker) makes its own: ``env`` is what the server imports torch in (its thread
    settings included), a run's own import path aside; ``preload``, what it imports (tests of the process
    handling alone pass none, and start in a fraction of a second).
    """

    def __init__(self, env: Mapping[str, str], preload: Sequence[str] = PRELOAD) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(list(preload))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=dict(env),
            cwd=tempfile.gettempdir(),
            text=True,
        )
        self.lock = threading.Lock()
        #: The process group of the run in flight (its child's pid), None between runs.
        self.running: int | None = None
        # Guards running and the two flags: a kill asked for between the request and the fork's reply is kept
        # for the run, which ends its child as soon as it knows the pid.
        self._state = threading.Lock()
        self._in_run = False
        self._kill_asked = False

    def kill_running(self) -> None:
        """End the run in flight, with every process it started (its process group); :meth:`run` then returns
        the killed run's status. Asked while the server is still forking, the kill follows the fork."""
        with self._state:
            if self.running is not None:
                _kill_group(self.running)
            elif self._in_run:
                self._kill_asked = True

    def close(self) -> None:
        """End the server; a run in flight is killed first."""
        self.kill_running()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # a request left unsent to a server that died: a broken pipe
                    stream.close()

    def run_module(
        self, module: str, *args: str, cwd: Path, env: Mapping[str, str], timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``python -m module args`` in ``cwd`` with exactly ``env`` (see :func:`run_module`)."""
        request = {"module": module, "args": list(args)}
        return self.run([sys.executable, "-m", module, *args], request, cwd=cwd, env=env, timeout=timeout)

    def _reply(self, timeout: float | None) -> dict[str, int] | None:
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                return None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the preloaded Python server exited ({self.process.poll()})")
        return json.loads(line)

    def run(
        self,
        command: list[str],
        request: dict[str, object],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float | None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``request`` (a module and its arguments, or code) as ``command`` would run in a fresh interpreter."""
        with self.lock, tempfile.TemporaryDirectory(prefix="modelgraft-preloaded-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            out.touch()  # there to read even where the child is killed before it opens them
            err.touch()
            request = {**request, "cwd": str(cwd), "env": dict(env), "stdout": str(out), "stderr": str(err)}
            assert self.process.stdin is not None
            with self._state:
                self._in_run, self._kill_asked = True, False
            try:
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
                started = self._reply(timeout=60)
                if started is None:
                    raise RuntimeError("the preloaded Python server did not fork within 60 s")
                with self._state:
                    self.running = started["pid"]
                    if self._kill_asked:
                        _kill_group(self.running)
                done = self._reply(timeout)
                if done is None:
                    self.kill_running()
                    self._reply(timeout=60)
                    raise subprocess.TimeoutExpired(command, timeout or 0, out.read_text(), err.read_text())
            finally:
                with self._state:
                    self.running, self._in_run = None, False
            return subprocess.CompletedProcess(command, done["returncode"], out.read_text(), err.read_text())


def _kill_group(pid: int) -> None:
    """SIGKILL to the process group a forked child leads (it calls ``setpgid(0, 0)`` first); to the child alone
    where it has not made its group yet, when it has started nothing either."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    except PermissionError:
        pass


def _server_env() -> dict[str, str]:
    """The environment the server imports torch and transformers in: this one, without a run's import path."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH" and not key.startswith("PYTEST_")}


@cache
def _server(env: tuple[tuple[str, str], ...]) -> PreloadedInterpreter:
    return PreloadedInterpreter(dict(env))


def run_module(
    module: str, *args: str, cwd: Path, env: Mapping[str, str], timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` in ``cwd`` with exactly ``env``, in a child that starts with :data:`PRELOAD` imported.

    ``env``'s ``PYTHONPATH`` decides where ``modelgraft`` comes from, as for a fresh interpreter. Runs wait
    for each other (one server per test process); a run past ``timeout`` is killed with its process group.
    """
    if not hasattr(os, "fork"):
        return subprocess.run(
            [sys.executable, "-m", module, *args], cwd=cwd, env=dict(env), capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
    command = [sys.executable, "-m", module, *args]
    request = {"module": module, "args": list(args)}
    return _server(tuple(sorted(_server_env().items()))).run(command, request, cwd=cwd, env=env, timeout=timeout)


def run_code(
    code: str, *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in ``cwd`` (with ``env``, this process's environment by default), started as
    :func:`run_module` starts a module: :data:`PRELOAD` imported, nothing of ``modelgraft``.

    For tests of what importing modelgraft does to a fresh interpreter: torch's and transformers' own imports
    are not what they test, and cost most of such a process.
    """
    env = dict(os.environ if env is None else env)
    command = [sys.executable, "-c", code]
    if not hasattr(os, "fork"):
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    request = {"code": code, "args": []}
    return _server(tuple(sorted(_server_env().items()))).run(command, request, cwd=cwd, env=env, timeout=timeout)
