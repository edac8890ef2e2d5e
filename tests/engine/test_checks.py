"""The checks of docs/design.md: a bad config fails with a message naming config, target and cause, and writes nothing.

Every rejection test starts from a project whose outputs are already
generated (so "writes nothing" also means "leaves existing files alone"),
swaps in the bad config and compares the whole tree byte for byte.
"""

from __future__ import annotations

from .projects import TOY_MODULE, TOY_MOE_MODULE, Project, Result, config_source

CONFIG = "zoo.toy.toy_gpu_patch_gen_config"


def reject(project: Project, body: str, *argv: str, header: str = "") -> Result:
    """Generate a valid toy config, swap in ``body``, run again: must exit 2 and leave the tree as it was."""
    project.config("toy", config_source(""))
    assert project.generate_all().code == 0
    assert project.output("toy").is_file()
    project.config("toy", config_source(body, header=header))
    before = project.snapshot()

    result = project.run(*(argv or ("--all", "--diff")))

    assert result.code == 2, (result.out, result.err)
    assert project.snapshot() == before
    assert result.err.startswith("patchgen: error: ")
    return result


def names(result: Result, *, target: str | None, cause: str, config: str = CONFIG) -> None:
    """The message names the config and its file, the target (when there is one) and the cause."""
    assert f"config {config} ({config.replace('.', '/')}.py)" in result.err
    if target is not None:
        assert f"target {target}" in result.err
    assert cause in result.err


# -- check 1: targets exist, and each applies exactly once --------------------------------------------


def test_unknown_class_target_is_rejected(project):
    result = reject(
        project,
        """
        @config.replace_class("ToyMLPP")
        class ToyMLPP:
            pass
        """,
    )
    names(result, target="ToyMLPP", cause=f"upstream {TOY_MODULE} defines no class 'ToyMLPP'")


def test_method_of_an_unknown_class_is_rejected(project):
    result = reject(
        project,
        """
        @config.override_method("ToyMPL.forward")
        def forward(self, x):
            return x
        """,
    )
    names(result, target="ToyMPL.forward", cause="defines no class 'ToyMPL'")


def test_unknown_function_target_is_rejected(project):
    result = reject(
        project,
        """
        @config.replace_function("toy_activaton")
        def toy_activaton(x):
            return x
        """,
    )
    names(
        result, target="toy_activaton", cause=f"upstream {TOY_MODULE} defines no module-level function 'toy_activaton'"
    )


def test_replace_function_on_a_class_is_rejected(project):
    result = reject(
        project,
        """
        @config.replace_function("ToyMLP")
        def ToyMLP(x):
            return x
        """,
    )
    names(result, target="ToyMLP", cause="defines no module-level function 'ToyMLP'")


def test_replace_class_with_a_function_body_is_rejected(project):
    result = reject(
        project,
        """
        @config.replace_class("ToyMLP")
        def ToyMLP(config):
            return config
        """,
    )
    names(result, target="ToyMLP", cause="replace_class needs a class")


def test_typo_in_a_method_name_is_an_error_not_a_new_method(project):
    result = reject(
        project,
        """
        @config.override_method("ToyMLP.fowrard")
        def forward(self, x):
            return x
        """,
    )
    names(
        result,
        target="ToyMLP.fowrard",
        cause="upstream class ToyMLP has no method 'fowrard' (nor inherits one); pass add=True",
    )


def test_add_true_for_a_method_upstream_defines_is_rejected(project):
    result = reject(
        project,
        """
        @config.override_method("ToyMLP.forward", add=True)
        def forward(self, x):
            return x
        """,
    )
    names(result, target="ToyMLP.forward", cause="add=True, but upstream already defines this method")


def test_add_true_for_a_method_a_base_class_defines_is_rejected(project):
    result = reject(
        project,
        """
        @config.override_method("ToyForSequenceClassification.forward", add=True)
        def forward(self, input_ids=None, labels=None, **kwargs):
            return None
        """,
    )
    names(
        result,
        target="ToyForSequenceClassification.forward",
        cause="add=True, but upstream already defines this method",
    )


def test_a_target_patched_twice_is_rejected(project):
    result = reject(
        project,
        """
        @config.override_method("ToyMLP.forward")
        def forward(self, x):
            return x

        @config.override_method("ToyMLP.forward")
        def forward_again(self, x):
            return x
        """,
    )
    names(result, target="ToyMLP.forward", cause="patched more than once")


def test_modify_init_needs_an_init_in_the_class_itself(project):
    result = reject(
        project,
        """
        @config.modify_init("ToyPreTrainedModel")
        def init(self, config):
            self.extra = 1
        """,
    )
    names(result, target="ToyPreTrainedModel", cause="modify_init needs an __init__ defined in the class itself")


def test_external_patch_of_an_unknown_class_is_rejected(project):
    result = reject(
        project, 'config.add_patch(create_patch_from_external("ToyMLPP", "zoo_ext.kernels", "FusedMLP"))\n'
    )
    names(result, target="ToyMLPP", cause="defines no class 'ToyMLPP'")


def test_exclusion_of_an_unknown_class_is_rejected(project):
    result = reject(project, 'config.exclude_from_output("ToyTalkr")\n')
    names(result, target="ToyTalkr", cause=f"cannot exclude: upstream {TOY_MODULE} defines no class 'ToyTalkr'")


def test_exclusion_listed_twice_is_rejected(project):
    result = reject(project, 'config.exclude_from_output("ToyTalker", "ToyTalker")\n')
    names(result, target="ToyTalker", cause="excluded more than once")


def test_a_class_both_patched_and_excluded_is_rejected(project):
    result = reject(
        project,
        """
        config.exclude_from_output("ToyMLP")

        @config.override_method("ToyMLP.forward")
        def forward(self, x):
            return x
        """,
    )
    names(result, target="ToyMLP", cause="both patched and excluded")


def test_excluding_a_class_that_a_kept_member_still_uses_is_rejected(project):
    result = reject(project, 'config.exclude_from_output("ToyMLP")\n')
    names(
        result,
        target="ToyMLP",
        cause="excluded class ToyMLP is still used by kept member ToyModel; patch ToyModel to stop using it",
    )


def test_excluding_a_class_is_accepted_once_a_patch_stops_using_it(project):
    _accept(
        project,
        """
        config.exclude_from_output("ToyMLP")

        @config.override_method("ToyModel.__init__")
        def init(self, config):
            super().__init__(config)
            self.mlp = None
        """,
    )
    assert "class ToyMLP" not in project.generated("toy")


def test_dropping_an_import_name_upstream_lacks_is_rejected(project):
    result = reject(project, 'config.drop_import_names("is_slow_path_available")\n')
    names(
        result,
        target="is_slow_path_available",
        cause=f"cannot drop: upstream {TOY_MODULE} has no module-level import of 'is_slow_path_available'",
    )


def test_dropping_an_import_twice_is_rejected(project):
    result = reject(
        project,
        """
        config.drop_import_names("ToyConfig", "ToyConfig")
        config.add_post_import_block("ToyConfig = dict\\n")
        """,
    )
    names(result, target="ToyConfig", cause="dropped more than once")


def test_two_configs_writing_the_same_file_are_rejected(project):
    project.config("toy", config_source(""))
    project.config("toy", config_source(""), backend="npu")  # same target_file as the gpu config
    before = project.snapshot()

    result = project.run("--all")

    assert result.code == 2
    assert "patched_modeling_toy_gpu.py" in result.err
    assert "zoo.toy.toy_gpu_patch_gen_config writes too" in result.err
    assert project.snapshot() == before


# -- check 2: signatures -----------------------------------------------------------------------------------


def _signature(project: Project, signature: str, target: str = "toy_scale") -> Result:
    return reject(
        project,
        f"""
        @config.replace_function({target!r})
        def {target}{signature}:
            return x
        """,
    )


def _accept(project: Project, body: str) -> None:
    project.config("toy", config_source(body))
    result = project.run("--all")
    assert result.code == 0, result.err


def test_renamed_parameter_is_signature_drift(project):
    result = _signature(project, "(x, scale=2.0)")
    names(result, target="toy_scale", cause="missing upstream parameter factor (positional-or-keyword=2.0)")


def test_reordered_parameters_are_signature_drift(project):
    result = reject(
        project,
        """
        @config.override_method("ToyForCausalLM.forward")
        def forward(self, labels=None, input_ids=None):
            return None
        """,
    )
    names(
        result,
        target="ToyForCausalLM.forward",
        cause="parameter order differs: upstream ['self', 'input_ids', 'labels'], override ['self', 'labels', 'input_ids']",
    )


def test_changed_default_is_signature_drift(project):
    result = _signature(project, "(x, factor=3.0)")
    names(
        result,
        target="toy_scale",
        cause="parameter factor: upstream factor (positional-or-keyword=2.0), override factor (positional-or-keyword=3.0)",
    )


def test_missing_parameter_is_signature_drift(project):
    result = _signature(project, "(x)")
    names(result, target="toy_scale", cause="missing upstream parameter factor")


def test_changed_parameter_kind_is_signature_drift(project):
    result = _signature(project, "(x, *, factor=2.0)")
    names(
        result,
        target="toy_scale",
        cause="parameter factor: upstream factor (positional-or-keyword=2.0), override factor (keyword-only=2.0)",
    )


def test_new_parameter_without_default_is_signature_drift(project):
    result = _signature(project, "(x, factor=2.0, *, bias)")
    names(result, target="toy_scale", cause="new parameter bias has no default, so upstream callers would break")


def test_new_positional_parameter_before_an_upstream_one_is_signature_drift(project):
    result = _signature(project, "(x, bias=0.0, factor=2.0)")
    names(result, target="toy_scale", cause="new parameter bias shifts upstream positional parameter factor")


def test_new_parameter_with_default_is_accepted(project):
    _accept(
        project,
        """
        @config.replace_function("toy_scale")
        def toy_scale(x, factor=2.0, bias=0.0):
            return x * factor + bias
        """,
    )
    assert "def toy_scale(x, factor=2.0, bias=0.0):" in project.generated("toy")


def test_new_var_keyword_parameter_is_accepted(project):
    _accept(
        project,
        """
        @config.replace_function("toy_scale")
        def toy_scale(x, factor=2.0, **kwargs):
            return x * factor
        """,
    )


def test_signature_of_an_inherited_method_is_checked_against_the_base(project):
    result = reject(
        project,
        """
        @config.override_method("ToyForSequenceClassification.forward")
        def forward(self, input_ids=None, **kwargs):
            return None
        """,
    )
    names(result, target="ToyForSequenceClassification.forward", cause="missing upstream parameter labels")


def test_signature_of_a_replaced_class_init_is_checked(project):
    result = reject(
        project,
        """
        @config.replace_class("ToyMLP")
        class ToyMLP:
            def __init__(self, cfg):
                self.config = cfg
        """,
    )
    names(result, target="ToyMLP.__init__", cause="missing upstream parameter config")


def test_signature_of_modify_init_wiring_is_checked_against_init(project):
    result = reject(
        project,
        """
        @config.modify_init("ToyModel")
        def init(self, cfg):
            self.extra = cfg
        """,
    )
    names(result, target="ToyModel.__init__", cause="missing upstream parameter config")


def test_check_signature_false_opts_out(project):
    _accept(
        project,
        """
        @config.replace_function("toy_scale", check_signature=False)
        def toy_scale(y):
            return y
        """,
    )
    assert "def toy_scale(y):" in project.generated("toy")


def test_the_error_says_to_follow_upstream_not_to_opt_out(project):
    result = _signature(project, "(x)")
    assert "(update the override to upstream's parameters; check_signature=False would keep the old contract)" in (
        result.err
    )


# -- check 3: undefined or redefined names -----------------------------------------------------------------


UNDEFINED = """
@config.replace_function("toy_activation")
def toy_activation(x):
    return undefined_kernel(x)
"""


def test_undefined_name_in_a_patch_body_is_rejected(project):
    result = reject(project, UNDEFINED)
    names(result, target="toy_activation", cause="output uses undefined or redefined names: F821")
    assert "undefined_kernel" in result.err
    assert "return undefined_kernel(x)" in result.err


def test_undefined_name_is_rejected_in_a_dry_run_too(project):
    result = reject(project, UNDEFINED, "--all", "--dry-run")
    names(result, target=None, cause="F821")
    assert "undefined_kernel" in result.err


def test_helper_redefining_an_upstream_name_is_rejected(project):
    result = reject(
        project,
        """
        @config.add_helper
        def shared_helper(x):
            return x
        """,
    )
    names(result, target="shared_helper", cause="F811")
    assert "shared_helper" in result.err


def test_dropping_an_import_that_upstream_still_uses_is_rejected(project):
    result = reject(project, 'config.drop_import_names("is_fast_path_available")\n')
    names(result, target=None, cause="F821")
    assert "is_fast_path_available" in result.err


# -- check 4: @auto_docstring overrides document their new parameters ------------------------------------------


def test_auto_docstring_override_with_an_undocumented_new_parameter_is_rejected(project):
    result = reject(
        project,
        '''
        @config.override_method("ToyModel.forward")
        def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, temperature: float = 1.0, **kwargs):
            r"""
            output_hidden_states (`bool`, *optional*):
                Whether to return the hidden states.
            """
            return input_ids
        ''',
    )
    names(
        result,
        target="ToyModel.forward",
        cause="overrides an @auto_docstring method but its docstring has no entry for new parameter(s) temperature",
    )


def test_auto_docstring_override_documenting_its_new_parameter_is_accepted(project):
    _accept(
        project,
        '''
        @config.override_method("ToyModel.forward")
        def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, temperature: float = 1.0, **kwargs):
            r"""
            temperature (`float`, *optional*, defaults to 1.0):
                Divides the hidden states.
            """
            return input_ids
        ''',
    )


def test_auto_docstring_check_does_not_apply_when_the_override_drops_auto_docstring(project):
    _accept(
        project,
        """
        @config.override_method("ToyModel.forward", keep_decorators=("auto_docstring",))
        def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, temperature: float = 1.0, **kwargs):
            return input_ids
        """,
    )
    assert "@auto_docstring\n    def forward" not in project.generated("toy")


def test_auto_docstring_check_applies_when_keep_decorators_names_nothing_to_drop(project):
    result = reject(
        project,
        """
        @config.override_method("ToyModel.forward", keep_decorators=())
        def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, temperature: float = 1.0, **kwargs):
            return input_ids
        """,
    )
    names(result, target="ToyModel.forward", cause="no entry for new parameter(s) temperature")


# -- check 5: name_map reuse must not drop output-dataclass fields -------------------------------------------


DENSE_FORWARD = '''
@config.override_method("ToyModel.forward")
def model_forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):
    r"""
    output_hidden_states (`bool`, *optional*):
        Whether to return the hidden states.
    """
    hidden = self.mlp.forward(input_ids)
    return ToyModelOutput(last_hidden_state=hidden, hidden_states=(hidden,) if output_hidden_states else None)
'''


def test_name_map_reuse_building_a_dataclass_with_other_fields_is_rejected(project):
    project.config("toy", config_source(DENSE_FORWARD))
    project.config(
        "toy_moe",
        config_source(
            'config.override_method("ToyMoeModel.forward", replacement=model_forward, name_map={"Toy": "ToyMoe"})\n',
            source_module=TOY_MOE_MODULE,
            target="patched_modeling_toy_moe_gpu.py",
            header="from zoo.toy.toy_gpu_patch_gen_config import model_forward\n",
        ),
    )
    before = project.snapshot()

    result = project.run("--all")

    assert result.code == 2
    names(
        result,
        config="zoo.toy_moe.toy_moe_gpu_patch_gen_config",
        target="ToyMoeModel.forward",
        cause="reused body (name_map) constructs ToyMoeModelOutput (from ToyModelOutput) but the field sets differ: "
        "fields the reused body never sets: router_logits",
    )
    assert project.snapshot() == before


def test_the_dense_config_itself_passes_the_dataclass_check(project):
    _accept(project, DENSE_FORWARD)


# -- check 6: configs, discovery, orphans ---------------------------------------------------------------------


def test_a_config_that_raises_on_import_is_an_error(project):
    result = reject(project, 'raise RuntimeError("broken on purpose")\n')
    names(result, target=None, cause="failed to import: RuntimeError: broken on purpose (toy_gpu_patch_gen_config.py:")


def test_a_config_with_a_syntax_error_is_an_error(project):
    result = reject(project, "def broken(:\n")
    names(result, target=None, cause="failed to import: SyntaxError")


def test_a_config_defining_no_patchconfig_is_an_error(project):
    project.config("toy", "VALUE = 1\n")
    before = project.snapshot()

    result = project.run("--all")

    assert result.code == 2
    names(result, target=None, cause="defines no PatchConfig")
    assert project.snapshot() == before


def test_a_discovery_root_with_no_configs_is_an_error(project):
    project.config("toy", config_source(""))
    project.write("empty_root/README.md", "no configs here\n")
    project.set_roots("zoo", "empty_root")
    before = project.snapshot()

    result = project.run("--all")

    assert result.code == 2
    assert f"discovery root {project.root / 'empty_root'} holds no *_patch_gen_config.py files" in result.err
    assert project.snapshot() == before


def test_a_missing_discovery_root_is_an_error(project):
    project.config("toy", config_source(""))
    project.set_roots("zoo", "no_such_root")

    result = project.run("--all")

    assert result.code == 2
    assert f"discovery root {project.root / 'no_such_root'} does not exist" in result.err


def test_no_pyproject_with_a_patchgen_section_is_an_error(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    result = project.run("--all", cwd=elsewhere)

    assert result.code == 2
    assert "no pyproject.toml with a [tool.patchgen] section" in result.err


def test_an_orphaned_generated_file_fails_generation(project):
    project.config("toy", config_source(""))
    assert project.generate_all().code == 0
    project.write("zoo/toy/generated/patched_modeling_gone_gpu.py", "# its config was deleted\n")
    before = project.snapshot()

    result = project.run("--all", "--diff")

    assert result.code == 2
    assert "generated file zoo/toy/generated/patched_modeling_gone_gpu.py has no config" in result.err
    assert project.snapshot() == before


def test_a_failing_config_stops_every_config_of_the_batch_from_being_written(project):
    project.config("toy", config_source(""))
    project.config(
        "toy_moe",
        config_source(
            'config.exclude_from_output("NoSuchClass")\n',
            source_module=TOY_MOE_MODULE,
            target="patched_modeling_toy_moe_gpu.py",
        ),
    )
    before = project.snapshot()

    result = project.run("--all", "--diff")

    assert result.code == 2
    assert "config zoo.toy_moe.toy_moe_gpu_patch_gen_config" in result.err
    assert project.snapshot() == before
    assert not project.output("toy").exists()


def test_a_failing_config_stops_the_batch_in_parallel_runs_too(project):
    project.config("toy", config_source(""))
    project.config(
        "toy_moe",
        config_source(
            'config.exclude_from_output("NoSuchClass")\n',
            source_module=TOY_MOE_MODULE,
            target="patched_modeling_toy_moe_gpu.py",
        ),
    )
    before = project.snapshot()

    result = project.run("--all", "-j", "2")

    assert result.code == 2
    names(result, config="zoo.toy_moe.toy_moe_gpu_patch_gen_config", target="NoSuchClass", cause="cannot exclude")
    assert project.snapshot() == before


# -- check 7: add_import that normalization would remove ---------------------------------------------------------


def test_add_import_of_a_name_nothing_uses_is_rejected(project):
    result = reject(project, 'config.add_import("collections", names=["OrderedDict"])\n')
    names(
        result,
        target="from collections import OrderedDict",
        cause="add_import 'from collections import OrderedDict': OrderedDict unused in the output, so normalization removes it",
    )


def test_plain_add_import_nothing_uses_is_rejected(project):
    result = reject(project, 'config.add_import("itertools", alias="it", is_from_import=False)\n')
    names(result, target="import itertools as it", cause="it unused in the output")


# -- patch sources ---------------------------------------------------------------------------------------------


def test_a_replacement_text_that_is_not_python_is_rejected(project):
    result = reject(
        project, 'config.replace_function("toy_activation", replacement="def toy_activation(x:\\n    return x\\n")\n'
    )
    names(result, target=None, cause="inline source is not valid Python")


def test_a_replacement_text_that_is_not_python_names_the_patch_target(project):
    result = reject(
        project, 'config.replace_function("toy_activation", replacement="def toy_activation(x:\\n    return x\\n")\n'
    )
    names(result, target="toy_activation", cause="inline source is not valid Python")
