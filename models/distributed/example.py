"""Train a tiny Qwen3-MoE for a few steps with FSDP2, expert parallelism and Ulysses, on CPU processes.

    python -m modelgraft.models.distributed.example --nproc 4 --sp 2 --ep 2 --steps 5
    torchrun --nproc-per-node 4 -m modelgraft.models.distributed.example --sp 2 --ep 2 --steps 5
    python -m modelgraft.models.distributed.example --nproc 4 --hsdp 2 --activation-checkpointing
    python -m modelgraft.models.distributed.example --nproc 4 --meta --steps 2 --checkpoint-dir ckpt
    python -m modelgraft.models.distributed.example --nproc 2 --sp 1 --resume --checkpoint-dir ckpt --steps 4 --export out
    python -m modelgraft.models.distributed.example --nproc 2 --compile aot_eager

``--meta`` builds the model on the meta device and gives each rank storage for its own shards only.
``--checkpoint-dir`` saves the training state (model, optimizer, LR scheduler, RNG, data position) there at
the end, as ``step_<N>``; ``--resume`` continues the latest one up to ``--steps`` (on any parallel layout:
the state reshards). ``--export`` writes the trained model as a hub checkpoint that upstream's
``from_pretrained`` loads. See docs/distributed.md, "The example: save, resume, export".

``--compile`` compiles each decoder layer in place (docs/compile.md), after the parallel plans and activation
checkpointing and before ``fully_shard``.

``--hsdp`` alone replicates across the nodes torchrun started (``WORLD_SIZE / LOCAL_WORLD_SIZE``) and shards
within each; ``--hsdp R`` sets the replica count. See docs/distributed.md, "Many nodes: torchrun".

Without torchrun's environment the script starts ``--nproc`` ranks itself (``launch.spawn``); under
torchrun it is one of the ranks. Rank 0 prints the loss of the global batch after every step.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from modelgraft.models.compiling import compile_layers
from modelgraft.models.distributed import (
    ParallelState,
    apply_activation_checkpointing,
    apply_expert_parallel,
    apply_fsdp,
    attach_parallel,
    clip_grad_norm,
    export_hub_checkpoint,
    load_train_state,
    materialize,
    save_train_state,
    shard_sequence,
)
from modelgraft.models.distributed.launch import spawn
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig

#: The training state folders under ``--checkpoint-dir``: ``step_<N>``.
STEP_PREFIX = "step_"


def tiny_qwen3_moe(attn_implementation: str, device: str | None = None) -> torch.nn.Module:
    from transformers import Qwen3MoeConfig

    config = Qwen3MoeConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=128,
        router_aux_loss_coef=0.01,
        use_cache=False,
        pad_token_id=0,
    )
    return build_model(
        config, architecture="Qwen3MoeForCausalLM", attn_implementation=attn_implementation, device=device
    )


def hsdp_replicas(requested: int | None) -> int:
    """HSDP's replica count: ``requested``, or (``--hsdp`` without a value, given as 0) one per node, read
    from torchrun's ``WORLD_SIZE / LOCAL_WORLD_SIZE``; None (no ``--hsdp``): 1, plain FSDP."""
    if requested is None:
        return 1
    if requested:
        return requested
    return int(os.environ.get("WORLD_SIZE", "1")) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def latest_state(folder: Path) -> Path:
    """The ``step_<N>`` folder of ``folder`` with the largest N (what ``--resume`` continues)."""
    saved = [path for path in folder.glob(f"{STEP_PREFIX}*") if path.name[len(STEP_PREFIX) :].isdigit()]
    if not saved:
        raise FileNotFoundError(f"--resume: no {STEP_PREFIX}<N> training state in {folder}")
    return max(saved, key=lambda path: int(path.name[len(STEP_PREFIX) :]))


def train(args: argparse.Namespace) -> None:
    state = ParallelState.build(sp=args.sp, ep=args.ep, replicate=hsdp_replicas(args.hsdp))
    torch.manual_seed(0)  # the same initial weights on every rank
    model = tiny_qwen3_moe("sdpa", device="meta" if args.meta else None)
    # torchtitan's order: parallelism plans, then activation checkpointing, then fully_shard. The parallel
    # settings belong to this model alone (attach_parallel): nothing process-wide is bound.
    apply_expert_parallel(model, state)
    attach_parallel(model, state, OpsConfig({"moe_experts": "grouped"}))
    if args.activation_checkpointing:
        apply_activation_checkpointing(model)
    if args.compile:  # each decoder layer in place, before fully_shard, as torchtitan orders it
        compile_layers(model.model.layers, backend=args.compile)
        if state.rank == 0:
            print(f"compiled {len(model.model.layers)} decoder layers with {args.compile}", flush=True)
    apply_fsdp(model, state)
    if args.meta:  # storage for this rank's shards only; a resumed state fills the weights
        materialize(model, weights=not args.resume)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / args.warmup))

    done = 0
    if args.resume:
        saved = latest_state(Path(args.checkpoint_dir))
        done = load_train_state(saved, model, optimizer, scheduler=scheduler).data_position
        if state.rank == 0:
            print(f"resumed {saved} at step {done}  [{state}]", flush=True)
    for step in range(done + 1, args.steps + 1):
        # The global batch of a step (a function of the step, so a resumed run draws what it would have):
        # every rank draws it, keeps its dp rows and its sp slice of each row.
        data = torch.Generator().manual_seed(step)
        input_ids = torch.randint(1, model.config.vocab_size, (args.batch * state.dp, args.seq_len), generator=data)
        rows = slice(state.dp_rank * args.batch, (state.dp_rank + 1) * args.batch)
        batch = {"input_ids": input_ids[rows], "labels": input_ids[rows].clone()}
        started = time.perf_counter()
        out = model(**shard_sequence(batch, state), output_router_logits=True)
        out.loss.backward()
        norm = clip_grad_norm(model, state, args.max_norm)  # every rank's norm: the one-process norm
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if state.rank == 0:
            print(
                f"step {step}: loss {out.loss.item():.4f} (aux {out.aux_loss.item():.4f}, grad norm {norm.item():.3f}) "
                f"{time.perf_counter() - started:.2f}s  [{state}]",
                flush=True,
            )
    last = max(done, args.steps)
    if args.checkpoint_dir and last > done:
        saved = Path(args.checkpoint_dir) / f"{STEP_PREFIX}{last}"
        save_train_state(saved, model, optimizer, step=last, data_position=last, scheduler=scheduler)
        if state.rank == 0:
            print(f"saved {saved}", flush=True)
    if args.export:
        files = export_hub_checkpoint(model, state, args.export)
        if state.rank == 0:
            print(f"exported {len(files)} file(s) to {args.export}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The example's options, one group per concern, so a new feature adds its flags to a group of its own."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=4, help="ranks to start when not under torchrun (default 4)")
    parallel = parser.add_argument_group("parallelism")
    parallel.add_argument("--sp", type=int, default=2, help="sequence-parallel size (default 2)")
    parallel.add_argument("--ep", type=int, default=2, help="expert-parallel size (default 2)")
    parallel.add_argument(
        "--hsdp",
        type=int,
        nargs="?",
        const=0,
        default=None,
        metavar="REPLICAS",
        help="HSDP: replicate over REPLICAS groups of ranks, shard within each (no value: one replica per node)",
    )
    memory = parser.add_argument_group("memory")
    memory.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute every decoder layer's forward in backward (less activation memory, about 1/3 more compute)",
    )
    memory.add_argument(
        "--meta", action="store_true", help="build on the meta device; each rank allocates only its own shards"
    )
    speed = parser.add_argument_group("speed")
    speed.add_argument(
        "--compile",
        nargs="?",
        const="inductor",
        default=None,
        metavar="BACKEND",
        help="torch.compile each decoder layer with BACKEND (no value: inductor; aot_eager needs no C++ compiler)",
    )
    checkpoints = parser.add_argument_group("checkpoints")
    checkpoints.add_argument(
        "--checkpoint-dir", metavar="DIR", help="save the training state to DIR/step_<N> at the end of the run"
    )
    checkpoints.add_argument(
        "--resume", action="store_true", help="continue the latest state in --checkpoint-dir, up to --steps"
    )
    checkpoints.add_argument(
        "--export", metavar="DIR", help="write the trained model to DIR as a hub checkpoint (from_pretrained loads it)"
    )
    parser.add_argument("--steps", type=int, default=5, help="train up to this optimizer step (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="steps of linear learning-rate warmup (default 2)")
    parser.add_argument("--batch", type=int, default=2, help="sequences per dp rank (default 2)")
    parser.add_argument("--seq-len", type=int, default=32, help="tokens per sequence (default 32)")
    parser.add_argument("--max-norm", type=float, default=1.0, help="gradient clipping norm (default 1.0)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the ranks are killed")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.resume and not args.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir")
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        train(args)
    else:
        spawn(train, args.nproc, args, timeout=args.timeout)


if __name__ == "__main__":
    main()
