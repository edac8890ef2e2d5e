"""Start ``nproc`` local processes that form one process group: what torchrun does, for tests and the example.

``spawn(fn, nproc, *args)`` runs ``fn(*args)`` in ``nproc`` fresh processes after setting torchrun's variables (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), so ``ParallelState.build`` finds the same environment it
finds under ``torchrun``. The first exception of any rank is raised in the caller with that rank's
traceback; after ``timeout`` seconds every rank is killed and ``TimeoutError`` raised. ``fn`` must be
importable by name (a module-level function).

The rendezvous store is hosted by the caller, as torchrun's agent hosts it (``TORCHELASTIC_USE_AGENT_STORE``):
it listens on a port the OS picks and holds until every rank is gone. Handing rank 0 a port that was free a
moment earlier would race every other process picking ports meanwhile (another test worker spawning its own
ranks), and a rank that reached another group's store would join the wrong job. A rank that dies in native
code (a signal, not an exception) leaves every thread's Python stack (``faulthandler``) in a file of its
own, and the caller's error carries it: the fork server's stderr, which the rank would otherwise write to,
belongs to whichever caller started the server.

The ranks are forked from a fork server (``torch.multiprocessing`` with the forkserver start method) that
has imported torch, transformers' modeling base and this package once: a rank then starts in milliseconds
instead of importing them again, which is most of what a short multi-rank test costs. The server only
imports; it builds no model, runs no kernel and joins no process group, so what a rank inherits is what a
fresh interpreter would hold after the same imports.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed import TCPStore

__all__ = ["spawn"]

#: What the fork server imports once, before it forks any rank.
PRELOAD = ("torch", "torch.distributed", "transformers.modeling_utils", "modelgraft.models.distributed")


def _fault_file(faults: Path, rank: int) -> Path:
    return faults / f"rank{rank}.txt"


def _entry(rank: int, fn: Callable[..., Any], nproc: int, port: int, faults: Path, args: tuple[Any, ...]) -> None:
    # What the rank inherits from the fork server is never garbage: kept out of its collections, which would
    # otherwise walk (and so copy, page by page) the server's whole heap of torch and transformers objects.
    gc.freeze()
    faulthandler.enable(_fault_file(faults, rank).open("w"), all_threads=True)
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": str(True),
            # Ranks share the machine's cores: one thread each keeps them from starving one another.
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        }
    )
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    try:
        fn(*args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(fn: Callable[..., Any], nproc: int, *args: Any, timeout: float = 120.0) -> None:
    """Run ``fn(*args)`` on ``nproc`` ranks of a fresh process group and wait for all of them."""
    if nproc < 1:
        raise ValueError(f"nproc must be positive, got {nproc}")
    # Read when this process first starts its fork server, ignored afterwards: the same list every time.
    mp.set_forkserver_preload(list(PRELOAD))
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout))
    with tempfile.TemporaryDirectory(prefix="modelgraft-ranks-") as faults:
        context = mp.start_processes(
            _entry,
            args=(fn, nproc, store.port, Path(faults), args),
            nprocs=nproc,
            join=False,
            start_method="forkserver",
        )
        deadline = time.monotonic() + timeout
        try:
            while not context.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{getattr(fn, '__qualname__', fn)} on {nproc} ranks ran past {timeout:.0f} s")
        except mp.ProcessExitedException as exited:
            stack = _fault_file(Path(faults), exited.error_index).read_text()
            raise mp.ProcessExitedException(
                f"{exited}; its Python stacks when it died:\n{stack or '(none recorded)'}",
                error_index=exited.error_index,
                error_pid=exited.error_pid,
                exit_code=exited.exit_code,
                signal_name=exited.signal_name,
            ) from exited
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                process.join(timeout=5)
            del store
