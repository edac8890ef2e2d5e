"""Child processes that a timeout or Ctrl-C ends together with their own children.

A model's tests run in a child forked from an interpreter that has imported torch and transformers already
(``modelgraft.models.testing.preloaded_python``, one per survey worker, started in the environment of the worker's
first run, its thread settings included): those imports and a first compile's were most of a fresh ``python -m
pytest``'s start. Nothing of ``modelgraft`` is imported before the fork, so the child imports the clone's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from modelgraft.scaffold.survey.classify import StepResult

if TYPE_CHECKING:
    from modelgraft.models.testing.preloaded_python import PreloadedInterpreter


class Runner:
    """Runs processes in their own process groups, so a timeout or Ctrl-C ends them with their children."""

    def __init__(self, preload: Sequence[str] | None = None) -> None:
        """``preload``: what each worker's interpreter imports before it forks a run (None: torch, transformers and
        what a first compile imports, ``preloaded_python.PRELOAD``)."""
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self.stopped = threading.Event()
        self._preload = preload
        #: Each worker thread's preloaded interpreter, with the environment it was started in.
        self._interpreters: dict[int, tuple[dict[str, str], PreloadedInterpreter]] = {}

    def run(self, argv: Sequence[str], cwd: Path, env: dict[str, str], timeout: float) -> StepResult:
        start = time.monotonic()
        with self._lock:  # a stop() either sees this process or comes before it starts
            if self.stopped.is_set():
                return StepResult(tuple(argv), None, "interrupted", 0.0, timed_out=True)
            process = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
            )
            self._running.add(process)
        try:
            output, _ = process.communicate(timeout=max(timeout, 1.0))
            timed_out = False
        except subprocess.TimeoutExpired:
            self._kill(process)
            try:
                output, _ = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # a descendant in a session of its own holds the pipe
                output = ""
            timed_out = True
        finally:
            with self._lock:
                self._running.discard(process)
        code = None if timed_out else process.returncode
        return StepResult(tuple(argv), code, output or "", time.monotonic() - start, timed_out)

    @staticmethod
    def _kill(process: subprocess.Popen) -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # the group this Popen started (start_new_session)
        except (ProcessLookupError, PermissionError):
            process.kill()

    def run_module(
        self, module: str, args: Sequence[str], cwd: Path, env: dict[str, str], timeout: float
    ) -> StepResult:
        """``python -m module args`` as :meth:`run` runs it, in a child of this thread's preloaded interpreter."""
        argv = (sys.executable, "-m", module, *args)
        if not hasattr(os, "fork"):
            return self.run(argv, cwd, env, timeout)
        start = time.monotonic()
        with self._lock:
            if self.stopped.is_set():
                return StepResult(argv, None, "interrupted", 0.0, timed_out=True)
            interpreter = self._interpreter(_server_env(env))
        try:
            done = interpreter.run_module(module, *args, cwd=cwd, env=env, timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired as expired:
            output = "".join(part or "" for part in (expired.stdout, expired.stderr))
            return StepResult(argv, None, str(output), time.monotonic() - start, timed_out=True)
        except (RuntimeError, OSError):  # the interpreter itself ended (killed, out of memory): a fresh one next run
            with self._lock:
                self._interpreters.pop(threading.get_ident(), None)
            interpreter.close()
            return self.run(argv, cwd, env, max(timeout - (time.monotonic() - start), 1.0))
        interrupted = self.stopped.is_set() and done.returncode < 0
        code = None if interrupted else done.returncode
        return StepResult(argv, code, done.stdout + done.stderr, time.monotonic() - start, interrupted)

    def _interpreter(self, env: dict[str, str]) -> PreloadedInterpreter:
        """This thread's interpreter, started anew where the environment of its imports changed (lock held)."""
        thread = threading.get_ident()
        found = self._interpreters.get(thread)
        if found is None or found[0] != env:
            # Imported here: the survey's modules import nothing of modelgraft.models (the module itself imports
            # neither torch nor transformers; its server, a process of its own, does).
            from modelgraft.models.testing.preloaded_python import PreloadedInterpreter

            if found is not None:
                found[1].close()
            interpreter = (
                PreloadedInterpreter(env) if self._preload is None else PreloadedInterpreter(env, self._preload)
            )
            found = self._interpreters[thread] = (env, interpreter)
        return found[1]

    def stop(self) -> None:
        with self._lock:
            self.stopped.set()
            for process in list(self._running):
                self._kill(process)
            for _, interpreter in self._interpreters.values():
                interpreter.kill_running()

    def close(self) -> None:
        """End the preloaded interpreters (a run in flight is killed)."""
        with self._lock:
            interpreters, self._interpreters = list(self._interpreters.values()), {}
        for _, interpreter in interpreters:
            interpreter.close()


def _server_env(env: Mapping[str, str]) -> dict[str, str]:
    """What an interpreter imports torch in: a run's environment without its import path (the clone's)."""
    return {key: value for key, value in env.items() if key != "PYTHONPATH"}
