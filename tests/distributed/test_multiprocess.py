"""FSDP2, expert parallelism, Ulysses and their combination, each equal to one process (gloo, CPU ranks).

Each test starts its ranks once (``modelgraft.models.distributed.launch.spawn``) and runs the scenarios of
``tests/distributed/scenarios.py`` there; a failed assertion on any rank fails the test with that
rank's traceback, and a hang fails it at the timeout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import transformers

from modelgraft.models.distributed.launch import spawn
from modelgraft.models.testing.preloaded_python import run_code

from . import scenarios

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 150.0


def test_fsdp2_on_llama_and_qwen3_moe_matches_one_process_after_an_adamw_step() -> None:
    spawn(scenarios.two_rank_fsdp, 2, timeout=TIMEOUT)


def test_ep2_outputs_aux_loss_and_gradients_match_grouped_experts_with_idle_experts() -> None:
    spawn(scenarios.two_rank_expert_parallel, 2, timeout=TIMEOUT)


def test_ulysses_sp2_on_llama_and_qwen3_and_on_qwen3_moe_with_a_4d_mask_matches_one_process() -> None:
    spawn(scenarios.two_rank_ulysses, 2, timeout=TIMEOUT)


def test_ulysses_sp2_on_sinks_latent_attention_and_dsa_matches_one_process_and_refuses_compressed_keys() -> None:
    spawn(scenarios.two_rank_ulysses_zoo_attention, 2, timeout=TIMEOUT)


def test_ep4_sp2_x_ep2_and_dp2_x_sp2_with_a_4d_mask_on_qwen3_moe_match_one_process() -> None:
    spawn(scenarios.four_rank_cases, 4, timeout=TIMEOUT)


#: Runs the example's ``main`` (what ``python -m modelgraft.models.distributed.example`` calls) once per
#: argument list, one after the other, each run's output after a line of its own.
_EXAMPLE_RUNS = """
import json
from modelgraft.models.distributed.example import main
for argv in json.loads({runs!r}):
    print("=== run", flush=True)
    main(argv)
"""


def run_example(*runs: tuple[str, ...], keep: tuple[str, ...] = ("step ",)) -> list[list[str]]:
    """Run the example as a user would (no torchrun: it starts its own ranks), once per argument list; each
    run's lines that start with one of ``keep`` (``step N: ...``).

    The runs share one process, forked from an interpreter that has imported torch and transformers but nothing
    of modelgraft (``run_code``): the second run's ranks fork from the fork server the first run started. Each
    run's ranks are new processes, so what one run hands the next is what it wrote to disk.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("RANK", None)
    argvs = [[*flags, "--timeout", str(TIMEOUT)] for flags in runs]
    code = _EXAMPLE_RUNS.format(runs=json.dumps(argvs))
    result = run_code(code, cwd=REPO_ROOT, env=env, timeout=len(runs) * TIMEOUT + 30)
    assert result.returncode == 0, result.stderr[-4000:]
    outputs = result.stdout.split("=== run\n")[1:]
    assert len(outputs) == len(runs), result.stdout[-4000:]
    return [[line for line in output.splitlines() if line.startswith(keep)] for output in outputs]


def test_example_trains_saves_resumes_on_another_layout_and_exports_what_upstream_loads(tmp_path: Path) -> None:
    """Two runs of the example: SP x EP built on meta, saved at step 2; then resumed under HSDP with
    activation checkpointing (the state reshards), trained to step 3 and exported for from_pretrained."""
    common = ("--nproc", "2", "--seq-len", "12", "--checkpoint-dir", str(tmp_path / "ckpt"))
    first, resumed = run_example(
        (*common, "--sp", "2", "--ep", "2", "--meta", "--steps", "2"),
        (
            *common, "--sp", "1", "--ep", "1", "--hsdp", "2", "--activation-checkpointing", "--meta",
            "--resume", "--steps", "3", "--export", str(tmp_path / "hub"),
        ),
    )  # fmt: skip
    assert [line.split(":")[0] for line in first] == ["step 1", "step 2"], first
    assert all(float(line.split("loss ")[1].split()[0]) > 0 for line in first)
    assert (tmp_path / "ckpt" / "step_2").is_dir()
    assert [line.split(":")[0] for line in resumed] == ["step 3"], resumed
    assert all("replicate=2" in line for line in resumed), resumed
    model, info = transformers.Qwen3MoeForCausalLM.from_pretrained(tmp_path / "hub", output_loading_info=True)
    assert not any(info.values()), info
    assert model.model.layers[0].mlp.experts.gate_up_proj.shape[0] == model.config.num_experts


def _figures(line: str) -> str:
    """A ``step N: ...`` line without its timing: the loss, aux loss and grad norm rank 0 printed."""
    return line.split(") ")[0]


@pytest.mark.heavy
def test_example_with_each_layer_compiled_trains_as_it_does_eagerly() -> None:
    """FSDP2, EP=2 and SP=2 on 2 ranks, every decoder layer compiled (aot_eager: no C++ compiler needed): each
    step's loss, aux loss and gradient norm are the eager run's, to the printed digits."""
    common = ("--nproc", "2", "--sp", "2", "--ep", "2", "--seq-len", "12", "--steps", "2")
    eager, compiled = run_example(common, (*common, "--compile", "aot_eager"), keep=("step ", "compiled "))
    assert compiled[0] == "compiled 2 decoder layers with aot_eager", compiled
    assert len(eager) == 2, eager
    assert [_figures(line) for line in compiled[1:]] == [_figures(line) for line in eager]
