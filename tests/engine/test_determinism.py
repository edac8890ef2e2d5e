"""Same inputs, same bytes: on every run, alone or in a batch, serial or parallel, from any cwd, any hash seed, any order."""

from __future__ import annotations

import shutil

from .projects import TOY_MOE_MODULE, Project, config_source

GPU = """
config.add_import("collections", names=["OrderedDict", "Counter"])
config.add_import("itertools", alias="it", is_from_import=False)
config.add_post_import_block("BLOCK = 1\\n")
config.exclude_from_output("ToyTalker")
config.drop_import_names("is_fast_path_available")
config.add_post_import_block("def is_fast_path_available():\\n    return BLOCK > 0\\n")


@config.add_helper(description="helper")
def helper(x):
    return OrderedDict(x=x), Counter(it.repeat(x, 2))


@config.override_method("ToyMLP.forward", description="helper mlp")
def mlp_forward(self, x):
    # a comment
    return helper(x)


@config.override_method("ToyForSequenceClassification.forward")
def seq_forward(self, input_ids=None, labels=None, **kwargs):
    return input_ids


@config.override_method("ToyForCausalLM.get_parallel_plan", add=True)
def get_parallel_plan(self):
    return {"b": 2, "a": 1}


@config.modify_init("ToyModel")
def init(self, config):
    self.extra = {"z", "y", "x"}


@config.replace_function("toy_scale")
def toy_scale(x, factor=2.0):
    return x * factor
"""

# A sibling with code of its own: one that only inherits would be refused (it would equal the gpu output).
NPU = """
config.inherit_from(gpu, skip_targets=("toy_scale",))


@config.replace_function("toy_scale", description="npu scale")
def toy_scale(x, factor=2.0):
    return factor * x
"""

MOE = """
config.override_method("ToyMoeMLP.forward", replacement=mlp_forward, name_map={"Toy": "ToyMoe"})
config.add_helper(helper)
config.add_import("collections", names=["OrderedDict", "Counter"])
config.add_import("itertools", alias="it", is_from_import=False)
"""


def build_zoo(project: Project) -> None:
    project.config("toy", config_source(GPU))
    project.config(
        "toy",
        config_source(
            NPU,
            target="patched_modeling_toy_npu.py",
            header="from zoo.toy.toy_gpu_patch_gen_config import config as gpu\n",
        ),
        backend="npu",
    )
    project.config(
        "toy_moe",
        config_source(
            MOE,
            source_module=TOY_MOE_MODULE,
            target="patched_modeling_toy_moe_gpu.py",
            header="from zoo.toy.toy_gpu_patch_gen_config import helper, mlp_forward\n",
        ),
    )


def generated(project: Project) -> dict[str, bytes]:
    files = {k: v for k, v in project.snapshot().items() if "/generated/" in k}
    assert len(files) == 6, sorted(files)
    return files


def wipe(project: Project) -> None:
    for folder in project.root.glob("zoo/*/generated"):
        shutil.rmtree(folder)
    shutil.rmtree(project.root / ".patchgen_cache", ignore_errors=True)


def test_two_runs_write_identical_bytes(project):
    build_zoo(project)
    assert project.generate_all().code == 0
    first = generated(project)
    wipe(project)

    assert project.generate_all().code == 0

    assert generated(project) == first


def test_a_second_run_rewrites_nothing(project):
    build_zoo(project)
    assert project.generate_all().code == 0
    mtimes = {p: p.stat().st_mtime_ns for p in project.root.glob("zoo/*/generated/*")}

    result = project.generate_all()

    assert result.code == 0
    assert "wrote" not in result.out
    assert {p: p.stat().st_mtime_ns for p in project.root.glob("zoo/*/generated/*")} == mtimes


def test_a_config_alone_gives_the_same_bytes_as_in_a_batch(project):
    build_zoo(project)
    assert project.generate_all().code == 0
    batch = generated(project)
    wipe(project)

    for module in (project.module("toy"), project.module("toy", backend="npu"), project.module("toy_moe")):
        assert project.run(module, "--diff").code == 0

    assert generated(project) == batch


def test_serial_and_parallel_runs_give_the_same_bytes(project):
    build_zoo(project)
    assert project.generate_all("-j", "1").code == 0
    serial = generated(project)
    wipe(project)

    assert project.generate_all("-j", "2").code == 0

    assert generated(project) == serial


def test_output_does_not_depend_on_the_working_directory(project):
    build_zoo(project)
    assert project.generate_all().code == 0
    from_root = generated(project)
    wipe(project)

    result = project.run("--all", "--diff", cwd=project.root / "zoo" / "toy_moe")

    assert result.code == 0, result.err
    assert generated(project) == from_root


def test_output_does_not_depend_on_the_order_configs_are_named_in(project):
    build_zoo(project)
    modules = [project.module("toy"), project.module("toy", backend="npu"), project.module("toy_moe")]
    assert project.run(*modules, "--diff").code == 0
    forward = generated(project)
    wipe(project)

    assert project.run(*reversed(modules), "--diff").code == 0

    assert generated(project) == forward


def test_output_does_not_depend_on_the_order_of_discovery_roots(project):
    build_zoo(project)
    project.config("toy2", config_source("", target="patched_modeling_toy2_gpu.py"), root="zoo2")
    project.set_roots("zoo", "zoo2")
    assert project.generate_all().code == 0
    zoo_first = project.snapshot()
    wipe(project)
    shutil.rmtree(project.root / "zoo2" / "toy2" / "generated")

    project.set_roots("zoo2", "zoo")
    assert project.generate_all().code == 0

    zoo2_first = project.snapshot()
    assert {k: v for k, v in zoo2_first.items() if k != "pyproject.toml"} == {
        k: v for k, v in zoo_first.items() if k != "pyproject.toml"
    }


def test_output_does_not_depend_on_the_hash_seed(project):
    build_zoo(project)
    first = project.run_subprocess("--all", "--diff", env={"PYTHONHASHSEED": "1"})
    assert first.code == 0, first.err
    seeded_1 = generated(project)
    wipe(project)

    second = project.run_subprocess("--all", "--diff", env={"PYTHONHASHSEED": "4242"})

    assert second.code == 0, second.err
    assert generated(project) == seeded_1


def test_a_subprocess_run_writes_what_an_in_process_run_writes(project):
    build_zoo(project)
    assert project.generate_all().code == 0
    in_process = generated(project)
    wipe(project)

    result = project.run_subprocess("--all", "--diff")

    assert result.code == 0, result.err
    assert generated(project) == in_process


def test_output_does_not_depend_on_the_output_folder(project, tmp_path):
    project.config("toy", config_source(GPU))
    assert project.run(project.module("toy"), "--diff").code == 0

    result = project.run(project.module("toy"), "--diff", "-o", str(tmp_path / "elsewhere"))

    assert result.code == 0, result.err
    assert (tmp_path / "elsewhere/patched_modeling_toy_gpu.py").read_bytes() == project.output("toy").read_bytes()
    assert (tmp_path / "elsewhere/patched_modeling_toy_gpu.diff").read_bytes() == project.output(
        "toy", suffix=".diff"
    ).read_bytes()
