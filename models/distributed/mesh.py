"""The parallel state: one object holding the DeviceMeshes of a run and the process groups read from them.

Every rank holds different tokens; the ranks are laid out as a ``(dp, sp)`` mesh built with
``torch.distributed.device_mesh.init_device_mesh``:

* ``sp`` (sequence parallel, innermost): the ranks that share one batch of sequences, each holding a
  contiguous slice of every sequence (Ulysses, ``modelgraft.models.distributed.ulysses``);
* ``dp`` (data parallel / FSDP): groups of ``sp`` ranks holding different sequences.

All ``dp * sp`` ranks together are the *data* group: FSDP shards the dense parameters over it, and the
global-batch losses (``modelgraft.models.distributed.losses``) reduce over it. Expert parallelism borrows its
ranks from the data group: the world is also laid out as ``(ep_replicate, ep)``, the ``ep`` ranks of a
row hold different experts of every MoE layer and exchange tokens with all-to-all, and the
``ep_replicate`` ranks of a column hold the same experts (FSDP shards those over ``ep_replicate``).

Build it from torchrun's environment (``ParallelState.build(sp=2, ep=2)``) or with the process group
already initialized by a test; the backend is gloo on CPU, nccl on CUDA, hccl on Ascend NPUs.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["ParallelConfigError", "ParallelState", "default_backend", "default_device_type", "parallel_sizes"]

#: How long a collective may wait for its peers before the process group gives up (a hung test fails).
DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)


class ParallelConfigError(ValueError):
    """Parallel sizes that do not fit the world (or the model): the message names every size involved."""


def default_device_type() -> str:
    """``"cuda"`` or ``"npu"`` when such a device exists, else ``"cpu"``."""
    if torch.cuda.is_available():
        return "cuda"
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return "npu"
    return "cpu"


def default_backend(device_type: str) -> str:
    """The collective backend of a device type: gloo on CPU, nccl on CUDA, hccl on NPU."""
    try:
        return {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}[device_type]
    except KeyError:
        raise ParallelConfigError(f"no collective backend known for device type {device_type!r}") from None


def parallel_sizes(world_size: int, *, sp: int = 1, ep: int = 1, dp: int | None = None) -> tuple[int, int, int]:
    """``(dp, sp, ep)`` for ``world_size`` ranks; ``dp`` defaults to ``world_size // sp``.

    Raises :class:`ParallelConfigError` when the sizes do not divide the world: ``dp * sp`` must be the
    world size and ``ep`` must divide it (expert-parallel ranks are borrowed from the data ranks).
    """
    for name, size in (("sp", sp), ("ep", ep), ("dp", dp)):
        if size is not None and (not isinstance(size, int) or size < 1):
            raise ParallelConfigError(f"{name} must be a positive int, got {size!r}")
    if dp is None:
        if world_size % sp:
            raise ParallelConfigError(
                f"sp={sp} does not divide the world of {world_size} ranks (dp * sp must equal the world size)"
            )
        dp = world_size // sp
    problems = []
    if dp * sp != world_size:
        problems.append(f"dp * sp = {dp} * {sp} = {dp * sp} is not the world size {world_size}")
    if world_size % ep:
        problems.append(f"ep={ep} does not divide the world size {world_size}")
    if problems:
        raise ParallelConfigError(
            f"parallel sizes dp={dp}, sp={sp}, ep={ep} do not fit {world_size} ranks: " + "; ".join(problems)
        )
    return dp, sp, ep


@dataclass(frozen=True)
class ParallelState:
    """The meshes of one run and the sizes, ranks and groups derived from them; pass it down explicitly."""

    device_type: str
    dp: int
    sp: int
    ep: int
    #: ``(dp, sp)``: FSDP and data loading read ``dp``, Ulysses reads ``sp``.
    mesh: DeviceMesh
    #: 1-D mesh over every rank ("data"): what FSDP shards dense parameters over and losses reduce over.
    data_mesh: DeviceMesh
    #: ``(ep_replicate, ep)``: experts are split over ``ep``, and FSDP-sharded over ``ep_replicate``.
    ep_mesh: DeviceMesh

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        *,
        sp: int = 1,
        ep: int = 1,
        dp: int | None = None,
        device_type: str | None = None,
        timeout: datetime.timedelta = DEFAULT_TIMEOUT,
    ) -> ParallelState:
        """The state for the current world; initializes the default process group from the environment
        (torchrun's ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) if it is not yet.

        The sizes are checked before any mesh is built, so a bad combination fails at once on every rank.
        """
        device_type = device_type or default_device_type()
        if not dist.is_initialized():
            world = int(os.environ.get("WORLD_SIZE", "1"))
            parallel_sizes(world, sp=sp, ep=ep, dp=dp)  # fail before waiting for peers
            if device_type == "cuda" and "LOCAL_RANK" in os.environ:
                torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group(backend=default_backend(device_type), timeout=timeout)
        world = dist.get_world_size()
        dp, sp, ep = parallel_sizes(world, sp=sp, ep=ep, dp=dp)
        mesh = init_device_mesh(device_type, (dp, sp), mesh_dim_names=("dp", "sp"))
        data_mesh = DeviceMesh(device_type, torch.arange(world), mesh_dim_names=("data",))
        ep_mesh = DeviceMesh(
            device_type, torch.arange(world).reshape(world // ep, ep), mesh_dim_names=("ep_replicate", "ep")
        )
        return cls(device_type=device_type, dp=dp, sp=sp, ep=ep, mesh=mesh, data_mesh=data_mesh, ep_mesh=ep_mesh)

    # -- sizes and ranks --------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.dp * self.sp

    @property
    def rank(self) -> int:
        return dist.get_rank()

    @property
    def dp_rank(self) -> int:
        return self.mesh.get_local_rank("dp")

    @property
    def sp_rank(self) -> int:
        return self.mesh.get_local_rank("sp")

    @property
    def ep_rank(self) -> int:
        return self.ep_mesh.get_local_rank("ep")

    @property
    def ep_replicate(self) -> int:
        return self.world_size // self.ep

    # -- groups ------------------------------------------------------------------------------------------
    @property
    def sp_group(self) -> ProcessGroup:
        return self.mesh.get_group("sp")

    @property
    def dp_group(self) -> ProcessGroup:
        return self.mesh.get_group("dp")

    @property
    def data_group(self) -> ProcessGroup:
        return self.data_mesh.get_group("data")

    @property
    def ep_group(self) -> ProcessGroup:
        return self.ep_mesh.get_group("ep")

    @property
    def ep_replicate_group(self) -> ProcessGroup:
        return self.ep_mesh.get_group("ep_replicate")

    def __repr__(self) -> str:
        return f"ParallelState(world={self.world_size}, dp={self.dp}, sp={self.sp}, ep={self.ep}, {self.device_type})"
