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

HSDP (``ParallelState.build(replicate=r)``): FSDP's all-gathers and reduce-scatters cross every rank they
shard over, which is slow once that crosses nodes. With ``replicate=r`` the data ranks are also laid out
as a 2-D ``(replicate, shard)`` mesh of ``r`` rows of ``world / r`` consecutive ranks (one row per node
under torchrun's rank order): FSDP shards within a row and all-reduces gradients across rows
(``fully_shard`` with a 2-D mesh, torch's HSDP). The experts' ``ep_replicate`` ranks are split the same
way, ``(replicate, ep_shard)``. The losses still reduce over the whole data group.

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

__all__ = [
    "ParallelConfigError",
    "ParallelState",
    "default_backend",
    "default_device_type",
    "hsdp_sizes",
    "parallel_sizes",
]

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


def hsdp_sizes(world_size: int, replicate: int, ep: int = 1) -> tuple[int, int]:
    """``(shard, ep_shard)`` of HSDP with ``replicate`` rows: the sizes FSDP shards dense and expert
    parameters over within one row. Raises :class:`ParallelConfigError` when ``replicate`` does not divide
    the world or the ``ep_replicate`` size (``world / ep``): a row must hold whole ep groups."""
    if not isinstance(replicate, int) or replicate < 1:
        raise ParallelConfigError(f"replicate must be a positive int, got {replicate!r}")
    if world_size % replicate or (world_size // ep) % replicate:
        raise ParallelConfigError(
            f"HSDP replicate={replicate} must divide the world size {world_size} and its ep_replicate size "
            f"{world_size // ep} (ep={ep}): each replica (node) holds whole ep groups"
        )
    return world_size // replicate, world_size // ep // replicate


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
    #: HSDP's replicate degree (1: plain FSDP over every data rank).
    replicate: int = 1
    #: Under HSDP, ``(replicate, shard)`` over the data ranks; None without HSDP (see :attr:`fsdp_mesh`).
    hsdp_mesh: DeviceMesh | None = None
    #: Under HSDP, ``(replicate, ep_shard)`` over the ``ep_replicate`` ranks; None without HSDP.
    ep_hsdp_mesh: DeviceMesh | None = None

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        *,
        sp: int = 1,
        ep: int = 1,
        dp: int | None = None,
        replicate: int = 1,
        device_type: str | None = None,
        timeout: datetime.timedelta = DEFAULT_TIMEOUT,
    ) -> ParallelState:
        """The state for the current world; initializes the default process group from the environment
        (torchrun's ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) if it is not yet.

        ``replicate`` > 1 turns FSDP into HSDP (see the module doc): it must divide the world and the
        ``ep_replicate`` size, so a row of the data mesh (a node) holds whole ep groups.

        The sizes are checked before any mesh is built, so a bad combination fails at once on every rank.
        """
        device_type = device_type or default_device_type()
        if not dist.is_initialized():
            world = int(os.environ.get("WORLD_SIZE", "1"))
            parallel_sizes(world, sp=sp, ep=ep, dp=dp)  # fail before waiting for peers
            hsdp_sizes(world, replicate, ep)
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
        hsdp_mesh = ep_hsdp_mesh = None
        if replicate > 1:
            shard, ep_shard = hsdp_sizes(world, replicate, ep)
            ranks = torch.arange(world)
            hsdp_mesh = DeviceMesh(device_type, ranks.reshape(replicate, shard), mesh_dim_names=("replicate", "shard"))
            # rank = (row * ep_shard + i) * ep + ep_rank: each ep column split into the same node rows.
            ep_hsdp_mesh = DeviceMesh(
                device_type,
                ranks.reshape(replicate, ep_shard, ep).permute(2, 0, 1),
                mesh_dim_names=("ep", "replicate", "ep_shard"),
            )["replicate", "ep_shard"]
        return cls(
            device_type=device_type,
            dp=dp,
            sp=sp,
            ep=ep,
            mesh=mesh,
            data_mesh=data_mesh,
            ep_mesh=ep_mesh,
            replicate=replicate,
            hsdp_mesh=hsdp_mesh,
            ep_hsdp_mesh=ep_hsdp_mesh,
        )

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

    # -- what FSDP shards over ---------------------------------------------------------------------------
    @property
    def fsdp_mesh(self) -> DeviceMesh:
        """The mesh of dense FSDP units: the 1-D data mesh, or ``(replicate, shard)`` under HSDP."""
        return self.hsdp_mesh if self.hsdp_mesh is not None else self.data_mesh

    @property
    def expert_fsdp_mesh(self) -> DeviceMesh:
        """The mesh of expert FSDP units: ``ep_replicate``, or ``(replicate, ep_shard)`` under HSDP."""
        return self.ep_hsdp_mesh if self.ep_hsdp_mesh is not None else self.ep_mesh["ep_replicate"]

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
        hsdp = f", replicate={self.replicate}" if self.replicate > 1 else ""
        return f"ParallelState(world={self.world_size}, dp={self.dp}, sp={self.sp}, ep={self.ep}{hsdp}, {self.device_type})"
