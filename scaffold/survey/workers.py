"""The survey's worker threads: each takes models from a queue and surveys them in a clone of its own."""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from modelgraft.scaffold.survey.categories import UNKNOWN
from modelgraft.scaffold.survey.classify import BROKEN, ModelResult, Observation
from modelgraft.scaffold.survey.display import Display
from modelgraft.scaffold.survey.errors import SurveyError
from modelgraft.scaffold.survey.model_run import Settings, result_of, survey_model
from modelgraft.scaffold.survey.processes import Runner

#: The signals that end a survey: Ctrl-C, and SIGTERM, which the command line turns into Ctrl-C.
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _ending_signals_deferred() -> Iterator[None]:
    """An ending signal that arrives inside the block is handled when it ends, not in the middle of it.

    Raised while the workers are being started, its KeyboardInterrupt would leave run_survey before the
    wait for the started workers, and the caller would remove clones they still work in. Python handles
    signals in the main thread only; elsewhere there is nothing to defer.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous: dict[int, Callable[[int, object], object]] = {}
    for number in ENDING_SIGNALS:
        handler = signal.getsignal(number)
        if callable(handler):  # an ignored or default (process-ending) signal stays as it is
            previous[number] = handler
            signal.signal(number, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    for number in arrived:
        previous[number](number, None)


def run_survey(
    clone_for: Callable[[int], Path],
    jobs: int,
    names: Sequence[str],
    categories: dict[str, tuple[str, str]],
    settings: Settings,
    display: Display,
    runner: Runner,
    *,
    survey_one: Callable[[Path, str, str, Runner, Settings], Observation] = survey_model,
) -> list[ModelResult]:
    """Survey ``names`` with ``jobs`` worker threads, worker i in ``clone_for(i)``; results in ``names``' order.

    ``survey_one`` surveys one model in a clone (:func:`survey_model`; the tests pass a fake).
    """
    work: queue.Queue[str] = queue.Queue()
    for name in names:
        work.put(name)
    results: dict[str, ModelResult] = {}
    running: list[str] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    count = max(1, min(jobs, len(names)))
    # One event per worker, set when it ends: a Thread.join interrupted by Ctrl-C may later return early
    # (CPython's _wait_for_tstate_lock), and the clones must outlive every worker.
    ended = [threading.Event() for _ in range(count)]

    def worker(index: int) -> None:
        try:
            work_in(index)
        finally:
            ended[index].set()

    def work_in(index: int) -> None:
        try:
            clone = clone_for(index)
        except Exception as error:  # noqa: BLE001 - reported when no worker could start
            failures.append(error)
            display.message(f"scaffold-survey: worker {index} could not start: {error}")
            return
        while not runner.stopped.is_set():
            try:
                name = work.get_nowait()
            except queue.Empty:
                return
            with lock:
                running.append(name)
                display.started(running)
            start = time.monotonic()
            category = categories.get(name, (UNKNOWN, ""))
            try:
                observation = survey_one(clone, name, category[0], runner, settings)
                result = result_of(observation, category, time.monotonic() - start)
            except Exception as error:  # noqa: BLE001 - the survey itself failed on this model
                result = ModelResult(name, category[0], category[1], BROKEN,
                                     f"the survey failed on this model: {type(error).__name__}: {error}",
                                     seconds=round(time.monotonic() - start, 2))  # fmt: skip
            with lock:
                running.remove(name)
                if not runner.stopped.is_set():
                    results[name] = result
                    display.finished(result)
                display.started(running)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(count)]
    try:
        with _ending_signals_deferred():
            for thread in threads:
                thread.start()
        for event in ended:
            while not event.wait(0.2):
                pass
    except KeyboardInterrupt:
        runner.stop()
        for event in ended:
            while not event.wait(0.2):
                runner.stop()  # a process started after the first stop
        raise
    if len(failures) == len(threads):
        raise SurveyError(f"no worker could start: {failures[0]}")
    return [results[name] for name in names if name in results]
