"""Train a tiny Qwen3-MoE for a few steps with FSDP2, expert parallelism and Ulysses, on CPU processes.

    python -m modelgraft.models.distributed.example --nproc 4 --sp 2 --ep 2 --steps 5
    torchrun --nproc-per-node 4 -m modelgraft.models.distributed.example --sp 2 --ep 2 --steps 5
    python -m modelgraft.models.distributed.example --nproc 4 --hsdp 2 --activation-checkpointing

``--hsdp`` alone replicates across the nodes torchrun started (``WORLD_SIZE / LOCAL_WORLD_SIZE``) and shards
within each; ``--hsdp R`` sets the replica count. See docs/distributed.md, "Many nodes: torchrun".

Without torchrun's environment the script starts ``--nproc`` ranks itself (``launch.spawn``); under
torchrun it is one of the ranks. Rank 0 prints the loss of the global batch after every step.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from modelgraft.models.distributed import (
    ParallelState,
    apply_activation_checkpointing,
    apply_expert_parallel,
    apply_fsdp,
    clip_grad_norm,
    parallel_ops,
    register_ulysses,
    shard_sequence,
)
from modelgraft.models.distributed.launch import spawn
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, bind_ops


def tiny_qwen3_moe(attn_implementation: str) -> torch.nn.Module:
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
    return build_model(config, architecture="Qwen3MoeForCausalLM", attn_implementation=attn_implementation)


def hsdp_replicas(requested: int | None) -> int:
    """HSDP's replica count: ``requested``, or (``--hsdp`` without a value, given as 0) one per node, read
    from torchrun's ``WORLD_SIZE / LOCAL_WORLD_SIZE``; None (no ``--hsdp``): 1, plain FSDP."""
    if requested is None:
        return 1
    if requested:
        return requested
    return int(os.environ.get("WORLD_SIZE", "1")) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def train(args: argparse.Namespace) -> None:
    state = ParallelState.build(sp=args.sp, ep=args.ep, replicate=hsdp_replicas(args.hsdp))
    register_ulysses(state)
    bind_ops(parallel_ops(state, OpsConfig({"moe_experts": "grouped"})))
    torch.manual_seed(0)  # the same initial weights on every rank
    model = tiny_qwen3_moe("ulysses_sdpa")
    # torchtitan's order: parallelism plans, then activation checkpointing, then fully_shard.
    apply_expert_parallel(model, state)
    if args.activation_checkpointing:
        apply_activation_checkpointing(model)
    apply_fsdp(model, state)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    data = torch.Generator().manual_seed(1)
    for step in range(1, args.steps + 1):
        # The global batch: every rank draws it, keeps its dp rows and its sp slice of each row.
        input_ids = torch.randint(1, model.config.vocab_size, (args.batch * state.dp, args.seq_len), generator=data)
        rows = slice(state.dp_rank * args.batch, (state.dp_rank + 1) * args.batch)
        batch = {"input_ids": input_ids[rows], "labels": input_ids[rows].clone()}
        started = time.perf_counter()
        out = model(**shard_sequence(batch, state), output_router_logits=True)
        out.loss.backward()
        norm = clip_grad_norm(model, state, args.max_norm)  # every rank's norm: the one-process norm
        optimizer.step()
        optimizer.zero_grad()
        if state.rank == 0:
            print(
                f"step {step}: loss {out.loss.item():.4f} (aux {out.aux_loss.item():.4f}, grad norm {norm.item():.3f}) "
                f"{time.perf_counter() - started:.2f}s  [{state}]",
                flush=True,
            )


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
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps (default 5)")
    parser.add_argument("--batch", type=int, default=2, help="sequences per dp rank (default 2)")
    parser.add_argument("--seq-len", type=int, default=32, help="tokens per sequence (default 32)")
    parser.add_argument("--max-norm", type=float, default=1.0, help="gradient clipping norm (default 1.0)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the ranks are killed")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if "RANK" in os.environ:  # started by torchrun: this process is one rank
        train(args)
    else:
        spawn(train, args.nproc, args, timeout=args.timeout)


if __name__ == "__main__":
    main()
