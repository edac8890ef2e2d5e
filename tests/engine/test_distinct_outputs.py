"""A config whose output equals another's except for the header is refused: one generated file serves every backend.

Each rejection starts from a generated project, adds or swaps in the redundant sibling, and checks that the run
exits 2 with a message naming both configs and the cause, and leaves the tree byte for byte as it was.
"""

from __future__ import annotations

from .projects import Project, Result, config_source

GPU = """
@config.replace_function("toy_scale", description="gpu scale")
def toy_scale(x, factor=2.0):
    return x * factor
"""

SIBLING_HEADER = "from zoo.toy.toy_gpu_patch_gen_config import config as gpu\n"

#: Only inherits: the code is the gpu config's, the output differs in the header only.
INHERITS_ONLY = "config.inherit_from(gpu)\n"

#: Inherits, then replaces one function: code of its own.
DIFFERS = """
config.inherit_from(gpu, skip_targets=("toy_scale",))

@config.replace_function("toy_scale", description="npu scale")
def toy_scale(x, factor=2.0):
    return x * factor * 1.0
"""

GPU_CONFIG = "zoo.toy.toy_gpu_patch_gen_config"
NPU_CONFIG = "zoo.toy.toy_npu_patch_gen_config"


def sibling(project: Project, body: str) -> None:
    """Write the npu sibling of the toy gpu config with ``body``."""
    project.config(
        "toy", config_source(body, target="patched_modeling_toy_npu.py", header=SIBLING_HEADER), backend="npu"
    )


def refused(project: Project, *argv: str) -> Result:
    """Run ``patchgen *argv``: exit 2, the tree as it was, both configs and the cause named."""
    before = project.snapshot()

    result = project.run(*argv)

    assert result.code == 2, (result.out, result.err)
    assert project.snapshot() == before
    assert f"config {NPU_CONFIG} (zoo/toy/toy_npu_patch_gen_config.py)" in result.err
    assert "target patched_modeling_toy_npu.py" in result.err
    assert f"generates the same code as {GPU_CONFIG} (the two outputs differ in their header only)" in result.err
    return result


def test_generating_a_sibling_that_only_inherits_is_refused(project):
    project.config("toy", config_source(GPU))
    assert project.generate_all().code == 0
    sibling(project, INHERITS_ONLY)

    refused(project, "--all", "--diff")


def test_naming_both_configs_refuses_the_sibling_too(project):
    project.config("toy", config_source(GPU))
    sibling(project, INHERITS_ONLY)

    refused(project, GPU_CONFIG, NPU_CONFIG)


def test_the_check_refuses_a_sibling_that_only_inherits(project):
    project.config("toy", config_source(GPU))
    assert project.generate_all().code == 0
    sibling(project, INHERITS_ONLY)

    refused(project, "--check")


def test_the_check_compares_with_a_config_its_cache_skipped(project):
    project.config("toy", config_source(GPU))
    sibling(project, DIFFERS)
    assert project.generate_all().code == 0
    assert project.run("--check").code == 0  # both recorded in the check cache
    sibling(project, INHERITS_ONLY)  # the gpu config stays clean: the cache answers for it

    refused(project, "--check")


def test_the_message_says_to_delete_the_sibling_and_let_one_module_serve(project):
    project.config("toy", config_source(GPU))
    sibling(project, INHERITS_ONLY)

    result = refused(project, "--all")

    assert f"delete {NPU_CONFIG} and its generated file" in result.err


def test_a_sibling_whose_code_differs_is_generated(project):
    project.config("toy", config_source(GPU))
    sibling(project, DIFFERS)

    result = project.run("--all")

    assert result.code == 0, result.err
    assert "npu scale" in project.generated("toy", backend="npu")


def test_a_sibling_generated_alone_has_nothing_to_be_compared_with(project):
    project.config("toy", config_source(GPU))
    sibling(project, INHERITS_ONLY)

    result = project.run(NPU_CONFIG)

    assert result.code == 0, result.err
