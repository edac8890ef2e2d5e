"""Child processes that a timeout or Ctrl-C ends together with their own children."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from modelgraft.scaffold.survey.classify import StepResult


class Runner:
    """Runs processes in their own process groups, so a timeout or Ctrl-C ends them with their children."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self.stopped = threading.Event()

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

    def stop(self) -> None:
        with self._lock:
            self.stopped.set()
            for process in list(self._running):
                self._kill(process)
