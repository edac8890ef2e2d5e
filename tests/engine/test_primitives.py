"""Every patch DSL primitive (docs/dsl.md, "The primitives"), applied to the fake upstream ``toyupstream``.

Each test writes one small config, generates it through the CLI and reads
the generated text: what the primitive must change, and that nothing else
upstream is lost on the way.
"""

from __future__ import annotations

import re
import shutil
import textwrap

from .projects import LICENSE, TOY_MODULE, TOY_MOE_MODULE, UPSTREAM_FILES, class_source, config_source, section

UPSTREAM_TOY = UPSTREAM_FILES["toyupstream/models/toy/modeling_toy.py"]
FIRST_STATEMENT = "# A module-level if block (conditional definition).\n"  # the first statement after the imports


def _body(text: str) -> str:
    """The generated module without its do-not-edit header."""
    return text[text.index(LICENSE) :]


# -- what survives from upstream ------------------------------------------------------------


def test_config_without_patches_keeps_upstream_verbatim_after_the_import_block(project):
    body = _body(project.generate(""))

    upstream_tail = UPSTREAM_TOY[UPSTREAM_TOY.index(FIRST_STATEMENT) :]
    assert body.startswith(LICENSE)
    assert body.endswith(
        upstream_tail.replace("from ...utils import local_helper", "from toyupstream.utils import local_helper")
    )


def test_config_without_patches_keeps_every_upstream_import_made_absolute(project):
    body = _body(project.generate(""))

    import_block = body[len(LICENSE) : body.index(FIRST_STATEMENT)]
    assert sorted(line for line in import_block.splitlines() if line) == [
        "from dataclasses import dataclass",
        "from toyupstream.modeling_layers import GenericForSequenceClassification",
        "from toyupstream.modeling_utils import PreTrainedModel",
        "from toyupstream.models.toy.configuration_toy import ToyConfig",
        "from toyupstream.utils import ModelOutput, auto_docstring, can_return_tuple, is_fast_path_available",
        "import math",
    ]


def test_output_starts_with_the_do_not_edit_header(project):
    text = project.generate(
        """
        @config.override_method("ToyMLP.forward", description="scaled mlp")
        def mlp_forward(self, x):
            return x
        """
    )

    header = text[: text.index(LICENSE)]
    assert "# GENERATED FILE - DO NOT EDIT BY HAND." in header
    assert "# Source: toyupstream.models.toy.modeling_toy (toyupstream==1.0)" in header
    assert "# Config: zoo.toy.toy_gpu_patch_gen_config" in header
    assert "# Description: toy config" in header
    assert "#   - override_method ToyMLP.forward: scaled mlp" in header
    assert re.search(r"^# Fingerprint: [0-9a-f]{20}$", header, re.MULTILINE)
    assert "# Regenerate with: patchgen zoo.toy.toy_gpu_patch_gen_config" in header


def test_license_block_and_every_top_level_statement_survive_patching(project):
    text = project.generate(
        """
        @config.override_method("ToyMLP.forward")
        def mlp_forward(self, x):
            return x

        @config.replace_function("toy_activation")
        def toy_activation(x):
            return x
        """
    )

    assert LICENSE in text
    for statement in (
        "# A module-level if block (conditional definition).\nif is_fast_path_available():\n    FAST_PATH = True\nelse:\n    FAST_PATH = False\n",
        "try:\n    from math import tau as TAU\nexcept ImportError:  # TOY-TRY-COMMENT\n    TAU = 2 * math.pi\n",
        "DEFAULT_SCALE: float = 0.5\n",
        'TOY_REGISTRY = {}\nTOY_REGISTRY.setdefault("toy", "ToyModel")\n',
        '__all__ = ["ToyForCausalLM", "ToyForSequenceClassification", "ToyModel", "ToyPreTrainedModel", "ToyTalker"]\n',
    ):
        assert statement in text


def test_relative_imports_become_absolute_including_function_local_ones(project):
    text = project.generate("")

    assert "from toyupstream.models.toy.configuration_toy import ToyConfig\n" in text
    assert "from toyupstream.modeling_utils import PreTrainedModel\n" in text
    assert "        from toyupstream.utils import local_helper  # TOY-LOCAL-IMPORT\n" in text
    assert "from ." not in text


# -- replace_class / replace_function --------------------------------------------------------


def test_replace_class_swaps_the_whole_class_under_a_patched_class_banner(project):
    text = project.generate(
        '''
        @config.replace_class("ToyMLP", description="a simpler mlp")
        class ToyMLP:
            """The replacement."""

            def __init__(self, config):
                # REPLACEMENT-INIT-COMMENT
                self.config = config

            def forward(self, x):
                return x
        '''
    )

    cls = class_source(text, "ToyMLP")
    assert cls.startswith("# [PATCHED CLASS] ToyMLP: a simpler mlp\nclass ToyMLP:\n")
    assert '"""The replacement."""' in cls
    assert "# REPLACEMENT-INIT-COMMENT" in cls
    assert "extra_repr" not in cls
    assert "TOY-MLP-COMMENT" not in text
    assert "#   - replace_class ToyMLP: a simpler mlp" in text


def test_replace_class_keeps_the_upstream_class_decorators(project):
    text = project.generate(
        '''
        config.replace_class("ToyModelOutput", replacement="""
        class ToyModelOutput(ModelOutput):
            last_hidden_state: list | None = None
            hidden_states: tuple | None = None
            extra: int = 0
        """)
        '''
    )

    cls = class_source(text, "ToyModelOutput")
    assert "@dataclass\n@auto_docstring\nclass ToyModelOutput(ModelOutput):\n" in cls
    assert "extra: int = 0" in cls


def test_replace_class_does_not_duplicate_a_decorator_the_patch_repeats(project):
    text = project.generate(
        '''
        config.replace_class("ToyModelOutput", replacement="""
        @auto_docstring
        class ToyModelOutput(ModelOutput):
            last_hidden_state: list | None = None
            hidden_states: tuple | None = None
        """)
        '''
    )

    cls = class_source(text, "ToyModelOutput")
    assert cls.count("@auto_docstring") == 1
    assert cls.count("@dataclass") == 1


def test_replace_function_swaps_a_module_level_function_under_a_patched_function_banner(project):
    text = project.generate(
        """
        @config.replace_function("toy_activation", description="identity")
        def toy_activation(x):
            # PATCHED-FUNCTION-COMMENT
            return x
        """
    )

    fn = class_source(text, "toy_activation")
    assert fn == (
        "# [PATCHED FUNCTION] toy_activation: identity\ndef toy_activation(x):\n    # PATCHED-FUNCTION-COMMENT\n    return x\n"
    )
    assert "TOY-ACTIVATION-COMMENT" not in text


def test_replacement_body_takes_the_upstream_name_whatever_the_config_called_it(project):
    text = project.generate(
        """
        @config.replace_function("toy_activation")
        def my_identity_activation(x):
            return x
        """
    )

    assert "def toy_activation(x):\n    return x\n" in text
    assert "my_identity_activation" not in text


# -- override_method ----------------------------------------------------------------------------


def test_override_method_replaces_one_method_and_keeps_the_rest_of_the_class(project):
    text = project.generate(
        """
        @config.override_method("ToyMLP.forward", description="no scale")
        def mlp_forward(self, x):
            # PATCH-BODY-COMMENT: comments in a patch body survive
            return toy_activation(x)
        """
    )

    cls = class_source(text, "ToyMLP")
    assert cls.startswith("# [MODIFIED CLASS] ToyMLP\nclass ToyMLP:\n")
    assert (
        "    # [PATCHED METHOD] ToyMLP.forward: no scale\n"
        "    def forward(self, x):\n"
        "        # PATCH-BODY-COMMENT: comments in a patch body survive\n"
        "        return toy_activation(x)\n"
    ) in cls
    assert "        self.scale = DEFAULT_SCALE\n" in cls
    assert '    def extra_repr(self):\n        return f"scale={self.scale}"\n' in cls
    assert "TOY-MLP-COMMENT" not in text


def test_override_method_keeps_a_comment_after_the_last_statement_of_the_patch(project):
    text = project.generate(
        """
        @config.override_method("ToyMLP.forward")
        def mlp_forward(self, x):
            return x
            # TRAILING-PATCH-COMMENT: still part of the patch body
        """
    )

    assert "        return x\n        # TRAILING-PATCH-COMMENT: still part of the patch body\n" in text


def test_reindenting_a_patch_moves_its_docstring_but_not_the_inside_of_other_strings(project):
    text = project.generate(
        '''
        @config.override_method("ToyMLP.extra_repr")
        def extra_repr(self):
            """Patched repr.

            Second docstring paragraph.
            """
            template = """scale={}
          two-space line, kept as written
        column-zero line, kept as written"""
            return template.format(self.scale)
        '''
    )

    assert (
        "    def extra_repr(self):\n"
        '        """Patched repr.\n'
        "\n"
        "        Second docstring paragraph.\n"
        '        """\n'
        '        template = """scale={}\n'
        "  two-space line, kept as written\n"
        'column-zero line, kept as written"""\n'
    ) in text


def test_override_method_keeps_the_upstream_method_position(project):
    text = project.generate(
        """
        @config.override_method("ToyMLP.forward")
        def mlp_forward(self, x):
            return x
        """
    )

    cls = class_source(text, "ToyMLP")
    assert cls.index("def __init__") < cls.index("def forward") < cls.index("def extra_repr")


def test_override_method_keeps_upstream_decorators(project):
    text = project.generate(
        """
        @config.override_method("ToyModel.forward")
        def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):
            return input_ids
        """
    )

    assert (
        "    # [PATCHED METHOD] ToyModel.forward\n"
        "    @can_return_tuple\n"
        "    @auto_docstring\n"
        "    def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):\n"
        "        return input_ids\n"
    ) in text


def test_override_method_does_not_duplicate_a_decorator_the_patch_repeats(project):
    text = project.generate(
        '''
        config.override_method("ToyModel.forward", replacement="""
        @auto_docstring
        def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):
            return input_ids
        """)
        '''
    )

    method = section(text, "[PATCHED METHOD] ToyModel.forward", "return input_ids")
    assert method.count("@auto_docstring") == 1
    assert method.count("@can_return_tuple") == 1


def test_keep_decorators_false_drops_every_upstream_decorator(project):
    text = project.generate(
        """
        @config.override_method("ToyModel.forward", keep_decorators=False)
        def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):
            return input_ids
        """
    )

    assert (
        "    # [PATCHED METHOD] ToyModel.forward\n"
        "    def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):\n"
    ) in text


def test_keep_decorators_tuple_drops_only_the_named_decorators(project):
    text = project.generate(
        """
        @config.override_method("ToyModel.forward", keep_decorators=("can_return_tuple",))
        def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):
            return input_ids
        """
    )

    assert (
        "    # [PATCHED METHOD] ToyModel.forward\n"
        "    @auto_docstring\n"
        "    def forward(self, input_ids=None, attention_mask=None, *, output_hidden_states: bool = False, **kwargs):\n"
    ) in text
    assert "@can_return_tuple" not in text


def test_a_patch_can_add_a_decorator_upstream_lacks(project):
    text = project.generate(
        '''
        config.override_method("ToyForCausalLM.forward", replacement="""
        @can_return_tuple
        def forward(self, input_ids=None, labels=None):
            return input_ids
        """)
        '''
    )

    assert (
        "    # [PATCHED METHOD] ToyForCausalLM.forward\n    @can_return_tuple\n    def forward(self, input_ids=None, labels=None):\n"
        in text
    )


def test_registration_decorators_are_not_copied_into_the_output(project):
    text = project.generate(
        """
        @config.override_method("ToyMLP.forward")
        def mlp_forward(self, x):
            return x
        """
    )

    assert "config.override_method" not in text
    assert "@config" not in text


def test_override_of_an_inherited_method_is_emitted_in_the_subclass(project):
    text = project.generate(
        """
        @config.override_method("ToyForSequenceClassification.forward", description="own loss")
        def forward(self, input_ids=None, labels=None, **kwargs):
            # SEQ-CLS-PATCH-COMMENT
            return ("patched", input_ids, labels)
        """
    )

    cls = class_source(text, "ToyForSequenceClassification")
    assert cls == (
        "# [MODIFIED CLASS] ToyForSequenceClassification\n"
        "class ToyForSequenceClassification(GenericForSequenceClassification, ToyPreTrainedModel):\n"
        "    # [PATCHED METHOD] ToyForSequenceClassification.forward: own loss\n"
        "    def forward(self, input_ids=None, labels=None, **kwargs):\n"
        "        # SEQ-CLS-PATCH-COMMENT\n"
        '        return ("patched", input_ids, labels)\n'
    )


def test_override_of_a_method_inherited_through_two_levels_of_bases(project):
    text = project.generate(
        """
        @config.override_method("ToyModel.post_init")
        def post_init(self):
            self.initialized = "patched"
        """
    )

    cls = class_source(text, "ToyModel")
    assert (
        '    # [PATCHED METHOD] ToyModel.post_init\n    def post_init(self):\n        self.initialized = "patched"\n'
        in cls
    )
    assert "    def local_import(self, x):" in cls


def test_override_method_with_add_true_appends_a_new_method(project):
    text = project.generate(
        """
        @config.override_method("ToyMLP.get_parallel_plan", add=True, description="tp plan")
        def get_parallel_plan(self):
            # ADDED-METHOD-COMMENT
            return {"forward": "colwise"}
        """
    )

    cls = class_source(text, "ToyMLP")
    assert cls.endswith(
        '        return f"scale={self.scale}"\n'
        "\n"
        "    # [ADDED METHOD] ToyMLP.get_parallel_plan: tp plan\n"
        "    def get_parallel_plan(self):\n"
        "        # ADDED-METHOD-COMMENT\n"
        '        return {"forward": "colwise"}\n'
    )
    assert "# [MODIFIED CLASS] ToyMLP" in text


def test_added_method_replaces_the_placeholder_body_of_an_empty_class(project):
    text = project.generate(
        """
        @config.override_method("ToyForSequenceClassification.dummy_forward", add=True)
        def dummy_forward(self):
            return None
        """
    )

    cls = class_source(text, "ToyForSequenceClassification")
    assert "pass" not in cls
    assert "    # [ADDED METHOD] ToyForSequenceClassification.dummy_forward\n    def dummy_forward(self):\n" in cls


def test_added_method_on_a_one_line_class_moves_the_body_below_the_header(project):
    text = project.generate(
        """
        @config.override_method("ToyForTokenClassification.dummy_forward", add=True)
        def dummy_forward(self):
            return "dummy"
        """
    )

    assert class_source(text, "ToyForTokenClassification") == (
        "# [MODIFIED CLASS] ToyForTokenClassification\n"
        "class ToyForTokenClassification(ToyPreTrainedModel):\n"
        "    # [ADDED METHOD] ToyForTokenClassification.dummy_forward\n"
        "    def dummy_forward(self):\n"
        '        return "dummy"\n'
    )


# -- modify_init ----------------------------------------------------------------------------------


def test_modify_init_runs_extra_wiring_after_the_original_init_body(project):
    text = project.generate(
        '''
        @config.modify_init("ToyModel", description="wire the head")
        def model_init(self, config):
            """This docstring is not part of the wiring."""
            self.extra = ToyMLP(config)
            # INIT-WIRING-COMMENT between two statements
            self.wired = True
        '''
    )

    cls = class_source(text, "ToyModel")
    assert (
        "    def __init__(self, config):\n"
        "        super().__init__(config)\n"
        "        self.mlp = ToyMLP(config)\n"
        "        self.post_init()\n"
        "        # [MODIFIED INIT] ToyModel: wire the head\n"
        "        self.extra = ToyMLP(config)\n"
        "        # INIT-WIRING-COMMENT between two statements\n"
        "        self.wired = True\n"
    ) in cls
    assert "not part of the wiring" not in text
    assert cls.startswith("# [MODIFIED CLASS] ToyModel\n@auto_docstring\nclass ToyModel(ToyPreTrainedModel):\n")


def test_modify_init_keeps_a_comment_that_opens_the_wiring(project):
    text = project.generate(
        """
        @config.modify_init("ToyModel")
        def model_init(self, config):
            # INIT-WIRING-LEADING-COMMENT: why the extra wiring exists
            self.extra = ToyMLP(config)
        """
    )

    assert (
        "        # [MODIFIED INIT] ToyModel\n"
        "        # INIT-WIRING-LEADING-COMMENT: why the extra wiring exists\n"
        "        self.extra = ToyMLP(config)\n"
    ) in text


# -- name_map reuse ---------------------------------------------------------------------------------


def test_name_map_reuse_renames_identifiers_but_not_strings_or_comments(project):
    project.config(
        "toy",
        config_source(
            """
            @config.override_method("ToyMLP.forward")
            def mlp_forward(self, x):
                # ToyMLP comment: a comment is not an identifier
                assert isinstance(self.config, ToyConfig), "ToyConfig expected"
                return x
            """
        ),
    )
    project.config(
        "toy_moe",
        config_source(
            """
            config.override_method("ToyMoeMLP.forward", replacement=mlp_forward, name_map={"Toy": "ToyMoe"})
            """,
            source_module=TOY_MOE_MODULE,
            target="patched_modeling_toy_moe_gpu.py",
            header="from zoo.toy.toy_gpu_patch_gen_config import mlp_forward\n",
        ),
    )

    result = project.run("--all")

    assert result.code == 0, result.err
    assert (
        "    # [PATCHED METHOD] ToyMoeMLP.forward\n"
        "    def forward(self, x):\n"
        "        # ToyMLP comment: a comment is not an identifier\n"
        '        assert isinstance(self.config, ToyMoeConfig), "ToyConfig expected"\n'
        "        return x\n"
    ) in project.generated("toy_moe")
    assert 'assert isinstance(self.config, ToyConfig), "ToyConfig expected"' in project.generated("toy")


# -- imports, blocks, helpers ----------------------------------------------------------------


def test_add_import_from_import_joins_the_module_import_block(project):
    body = _body(
        project.generate(
            """
            config.add_import("collections", names=["OrderedDict"])

            @config.replace_function("toy_activation")
            def toy_activation(x):
                return OrderedDict(x=x)
            """
        )
    )

    import_block = body[len(LICENSE) : body.index(FIRST_STATEMENT)]
    assert "\nfrom collections import OrderedDict\n" in import_block
    assert body.count("from collections import OrderedDict") == 1


def test_add_import_with_alias_and_plain_import(project):
    text = project.generate(
        """
        config.add_import("itertools", alias="it", is_from_import=False)
        config.add_import("json", is_from_import=False)
        config.add_import("functools", names=["partial as bind"])

        @config.replace_function("toy_activation")
        def toy_activation(x):
            return it.repeat(json.dumps(x)), bind(print)
        """
    )

    imports = [line for line in text.splitlines() if line.startswith(("import ", "from "))]
    assert "import itertools as it" in imports
    assert "import json" in imports
    assert "from functools import partial as bind" in imports


def test_from_imports_of_one_module_are_merged_into_one_statement(project):
    text = project.generate(
        """
        config.add_import("collections", names=["OrderedDict"])
        config.add_import("collections", names=["Counter"])

        @config.replace_function("toy_activation")
        def toy_activation(x):
            return OrderedDict(x=x), Counter(x)
        """
    )

    assert "from collections import Counter, OrderedDict\n" in text
    assert text.count("from collections import") == 1


def test_drop_import_names_removes_only_the_named_upstream_imports(project):
    text = project.generate(
        """
        config.drop_import_names("is_fast_path_available")
        config.add_post_import_block('''
            def is_fast_path_available():
                return True
        ''')
        """
    )

    assert "from toyupstream.utils import ModelOutput, auto_docstring, can_return_tuple\n" in text
    assert "def is_fast_path_available():\n    return True\n" in text
    assert text.count("is_fast_path_available") == 2  # the block's definition and the upstream `if` using it


def test_drop_import_names_removes_a_statement_that_imports_only_that_name(project):
    text = project.generate(
        """
        config.drop_import_names("ToyConfig")
        config.add_post_import_block("ToyConfig = dict\\n")
        """
    )

    assert "configuration_toy" not in text
    assert "ToyConfig = dict\n" in text


def test_add_post_import_block_goes_between_the_imports_and_the_first_statement(project):
    text = project.generate(
        '''
        config.add_post_import_block("""
            # POST-IMPORT-BLOCK-COMMENT
            try:
                import fancy_kernels
            except ImportError:
                fancy_kernels = None
        """)

        @config.replace_function("toy_activation")
        def toy_activation(x):
            return fancy_kernels or x
        '''
    )

    block = (
        "# POST-IMPORT-BLOCK-COMMENT\ntry:\n    import fancy_kernels\nexcept ImportError:\n    fancy_kernels = None\n"
    )
    assert block in text
    assert text.index("from toyupstream.models.toy.configuration_toy import ToyConfig") < text.index(block)
    assert text.index(block) < text.index("if is_fast_path_available():")


def test_add_helper_with_a_function_object_places_it_after_the_imports_under_a_banner(project):
    text = project.generate(
        """
        @config.add_helper(description="shared by the patches")
        def double_then_add(x, y):
            # HELPER-COMMENT
            return 2 * x + y

        @config.replace_function("toy_activation")
        def toy_activation(x):
            return double_then_add(x, 0)
        """
    )

    helper = (
        "# [HELPERS]: shared by the patches\ndef double_then_add(x, y):\n    # HELPER-COMMENT\n    return 2 * x + y\n"
    )
    assert helper in text
    assert text.index(helper) < text.index("if is_fast_path_available():")


def test_add_helper_with_raw_text(project):
    text = project.generate(
        '''
        config.add_helper("""
            HELPER_CONSTANT = 7


            def helper_from_text():
                return HELPER_CONSTANT
        """)

        @config.replace_function("toy_activation")
        def toy_activation(x):
            return helper_from_text()
        '''
    )

    assert "# [HELPERS]\nHELPER_CONSTANT = 7\n\n\ndef helper_from_text():\n    return HELPER_CONSTANT\n" in text


def test_add_helper_as_a_plain_call_with_a_function_object(project):
    text = project.generate(
        """
        def plain_helper(x):
            return x

        config.add_helper(plain_helper)

        @config.replace_function("toy_activation")
        def toy_activation(x):
            return plain_helper(x)
        """
    )

    assert "# [HELPERS]\ndef plain_helper(x):\n    return x\n" in text


# -- exclude_from_output ----------------------------------------------------------------------------


def test_exclude_from_output_drops_the_class_and_members_only_it_used(project):
    text = project.generate('config.exclude_from_output("ToyTalker")\n')

    body = _body(text)
    assert "class ToyTalker:" not in body
    assert "class ToyTalkerBlock:" not in body
    assert "def talker_only_fn(" not in body
    assert "# Excluded: ToyTalker" in text


def test_exclude_from_output_keeps_members_that_something_kept_still_uses(project):
    text = project.generate('config.exclude_from_output("ToyTalker")\n')

    assert "def shared_helper(x):\n    return x - 1\n" in text
    assert "class ToyForCausalLM(ToyPreTrainedModel):" in text
    assert "def toy_activation(x):" in text


def test_exclude_from_output_also_drops_members_only_patched_away_code_used(project):
    text = project.generate(
        """
        config.exclude_from_output("ToyTalker")

        @config.override_method("ToyForCausalLM.forward")
        def forward(self, input_ids=None, labels=None):
            return self.model.forward(input_ids)
        """
    )

    assert "def shared_helper(" not in text


def test_exclude_from_output_removes_the_class_from___all__(project):
    text = project.generate('config.exclude_from_output("ToyTalker")\n')

    assert '__all__ = ["ToyForCausalLM", "ToyForSequenceClassification", "ToyModel", "ToyPreTrainedModel"]\n' in text


def test_exclude_from_output_leaves_the_rest_of_the_module_as_upstream_wrote_it(project):
    excluded = _body(project.generate('config.exclude_from_output("ToyTalker")\n'))
    kept = _body(project.generate(""))

    removed = [line for line in kept.splitlines() if line not in excluded.splitlines()]
    assert removed == [
        "def talker_only_fn(x):",
        "    return x + 1",
        "class ToyTalkerBlock:",
        "    def __call__(self, x):",
        "        return talker_only_fn(shared_helper(x))",
        "class ToyTalker:",
        "        self.block = ToyTalkerBlock()",
        "        return self.block(x)",
        '__all__ = ["ToyForCausalLM", "ToyForSequenceClassification", "ToyModel", "ToyPreTrainedModel", "ToyTalker"]',
    ]


# -- require_upstream_version ------------------------------------------------------------------------

VERSION_CHECK = 'config.require_upstream_version(check="zoo_ext.versions.require_generated_from")\n'
VERSION_CALL = 'require_generated_from("toyupstream", "1.0", __name__)\n'


def test_require_upstream_version_calls_the_check_with_the_upstream_version_the_header_names(project):
    text = project.generate(VERSION_CHECK)

    assert "# Source: toyupstream.models.toy.modeling_toy (toyupstream==1.0)" in text
    assert "\nfrom zoo_ext.versions import require_generated_from\n" in text
    assert "\n" + VERSION_CALL in text


def test_require_upstream_version_names_the_version_installed_when_generating(project):
    shutil.rmtree(project.site / "toyupstream-1.0.dist-info")
    metadata = project.site / "toyupstream-2.0.dist-info" / "METADATA"
    metadata.parent.mkdir()
    metadata.write_text("Metadata-Version: 2.1\nName: toyupstream\nVersion: 2.0\n", encoding="utf-8")

    text = project.generate(VERSION_CHECK)

    assert '\nrequire_generated_from("toyupstream", "2.0", __name__)\n' in text


def test_require_upstream_version_calls_the_check_before_post_import_blocks_and_helpers(project):
    text = project.generate(
        VERSION_CHECK
        + textwrap.dedent(
            """
            config.add_post_import_block("BLOCK = 1\\n")

            @config.add_helper
            def block_helper(x):
                return x + BLOCK
            """
        )
    )

    call = text.index(VERSION_CALL)
    assert text.index("from toyupstream.models.toy.configuration_toy import ToyConfig") < call
    assert call < text.index("BLOCK = 1\n") < text.index("# [HELPERS]") < text.index(FIRST_STATEMENT)


def test_require_upstream_version_adds_only_the_check_import_and_its_call(project):
    without = _body(project.generate("")).splitlines()

    added = [line for line in _body(project.generate(VERSION_CHECK)).splitlines() if line not in without]

    assert added == ["from zoo_ext.versions import require_generated_from", VERSION_CALL.rstrip("\n")]


def test_a_config_without_require_upstream_version_emits_no_version_check(project):
    text = project.generate("")

    assert "__name__" not in text
    assert "zoo_ext" not in text


def test_require_upstream_version_asked_twice_for_the_same_check_emits_one_call(project):
    text = project.generate(VERSION_CHECK + VERSION_CHECK)

    assert text.count(VERSION_CALL) == 1
    assert text.count("import require_generated_from") == 1


# -- create_patch_from_external ----------------------------------------------------------------------


def test_create_patch_from_external_points_the_class_at_the_external_implementation(project):
    text = project.generate(
        """
        config.add_patch(create_patch_from_external("ToyMLP", "zoo_ext.kernels", "FusedMLP"))
        """
    )

    assert (
        "# [PATCHED CLASS] ToyMLP: use zoo_ext.kernels.FusedMLP\nfrom zoo_ext.kernels import FusedMLP as ToyMLP\n"
        in text
    )
    assert "\nclass ToyMLP" not in text
    assert "#   - external_class ToyMLP: use zoo_ext.kernels.FusedMLP" in text


# -- inherit_from ---------------------------------------------------------------------------------------


GPU_CONFIG = """
config.add_import("collections", names=["OrderedDict"])
config.add_post_import_block("GPU_BLOCK = 1\\n")
config.exclude_from_output("ToyTalker")

@config.add_helper
def gpu_helper(x):
    return OrderedDict(x=x), GPU_BLOCK

@config.override_method("ToyMLP.forward", description="from gpu")
def mlp_forward(self, x):
    return gpu_helper(x)

@config.replace_function("toy_activation", description="from gpu")
def toy_activation(x):
    return gpu_helper(x)
"""


def _npu(project, body: str) -> str:
    project.config("toy", config_source(GPU_CONFIG))
    project.config(
        "toy",
        config_source(
            body,
            target="patched_modeling_toy_npu.py",
            header="from zoo.toy.toy_gpu_patch_gen_config import config as gpu\n",
        ),
        backend="npu",
    )
    result = project.run(project.module("toy", backend="npu"))
    assert result.code == 0, result.err
    return project.generated("toy", backend="npu")


def test_inherit_from_takes_the_sibling_patches_imports_blocks_helpers_and_exclusions(project):
    text = _npu(project, "config.inherit_from(gpu)\n")

    assert "# [PATCHED METHOD] ToyMLP.forward: from gpu" in text
    assert "# [PATCHED FUNCTION] toy_activation: from gpu" in text
    assert "from collections import OrderedDict\n" in text
    assert "GPU_BLOCK = 1\n" in text
    assert "# [HELPERS]\ndef gpu_helper(x):" in text
    assert "class ToyTalker" not in text
    assert "# Config: zoo.toy.toy_npu_patch_gen_config" in text
    assert not project.output("toy").exists()


def test_inherit_from_takes_the_sibling_version_check(project):
    project.config("toy", config_source(VERSION_CHECK))
    project.config(
        "toy",
        config_source(
            "config.inherit_from(gpu)\n",
            target="patched_modeling_toy_npu.py",
            header="from zoo.toy.toy_gpu_patch_gen_config import config as gpu\n",
        ),
        backend="npu",
    )

    result = project.run(project.module("toy", backend="npu"))

    assert result.code == 0, result.err
    assert "\n" + VERSION_CALL in project.generated("toy", backend="npu")


def test_inherit_from_skip_targets_leaves_those_patches_to_the_sibling(project):
    text = _npu(
        project,
        """
        config.inherit_from(gpu, skip_targets=("toy_activation",))

        @config.replace_function("toy_activation", description="npu kernel")
        def toy_activation(x):
            return x
        """,
    )

    assert "# [PATCHED FUNCTION] toy_activation: npu kernel" in text
    assert "from gpu" in section(text, "[PATCHED METHOD] ToyMLP.forward")
    assert "# [PATCHED FUNCTION] toy_activation: from gpu" not in text


def test_inherit_from_skip_targets_must_name_a_patch_of_the_sibling(project):
    project.config("toy", config_source(GPU_CONFIG))
    project.config(
        "toy",
        config_source(
            'config.inherit_from(gpu, skip_targets=("toy_activaton",))\n',
            target="patched_modeling_toy_npu.py",
            header="from zoo.toy.toy_gpu_patch_gen_config import config as gpu\n",
        ),
        backend="npu",
    )

    result = project.run(project.module("toy", backend="npu"))

    assert result.code == 2
    assert "skip_targets ['toy_activaton']" in result.err


def test_inherit_from_without_patches_takes_only_module_level_edits(project):
    text = _npu(
        project,
        """
        config.inherit_from(gpu, patches=False)

        @config.replace_function("toy_activation")
        def toy_activation(x):
            return gpu_helper(x)
        """,
    )

    assert "[PATCHED METHOD] ToyMLP.forward" not in text
    assert "# [HELPERS]\ndef gpu_helper(x):" in text
    assert "from collections import OrderedDict\n" in text


# -- config shape ------------------------------------------------------------------------------------------


def test_a_config_may_bind_its_patchconfig_to_any_variable_name(project):
    project.config(
        "toy",
        f"""
        from modelgraft.generator import PatchConfig

        toy_patches = PatchConfig({TOY_MODULE!r}, "patched_modeling_toy_gpu.py")


        @toy_patches.override_method("ToyMLP.forward")
        def mlp_forward(self, x):
            return x
        """,
    )

    result = project.run(project.module("toy"))

    assert result.code == 0, result.err
    text = project.generated("toy")
    assert "    # [PATCHED METHOD] ToyMLP.forward\n    def forward(self, x):\n        return x\n" in text
    assert "toy_patches" not in text


def test_generated_toy_module_with_the_project_check_refuses_another_upstream_version(project):
    project.generate(
        'config.require_upstream_version(check="modelgraft.models.upstream_version.require_generated_from")\n'
    )
    script = textwrap.dedent(
        """
        import toyupstream
        import patched_modeling_toy_gpu

        print("imported under", patched_modeling_toy_gpu.__name__)
        del sys.modules["patched_modeling_toy_gpu"]
        toyupstream.__version__ = "2.0"
        try:
            import patched_modeling_toy_gpu
        except ImportError as exc:
            print(type(exc).__name__, exc)
        """
    )

    result = project.run_subprocess(code=f"import sys; sys.path[:0] = ['zoo/toy/generated', '.']\n{script}")

    assert result.code == 0, result.err
    imported, refused = result.out.strip().splitlines()
    assert imported == "imported under patched_modeling_toy_gpu"
    assert refused.startswith(
        "UpstreamVersionError patched_modeling_toy_gpu was generated from toyupstream==1.0, but toyupstream 2.0 is installed"
    )


def test_generated_toy_module_imports_and_behaves_as_patched(project):
    project.write(
        "zoo_ext/kernels.py",
        """
        class FusedMLP:
            FUSED = True

            def __init__(self, config):
                self.config = config
        """,
    )
    project.write("zoo_ext/__init__.py", "")
    project.generate(
        """
        config.exclude_from_output("ToyTalker")
        config.add_patch(create_patch_from_external("ToyMLP", "zoo_ext.kernels", "FusedMLP"))

        @config.override_method("ToyForSequenceClassification.forward")
        def forward(self, input_ids=None, labels=None, **kwargs):
            return ("patched", input_ids, labels)

        @config.override_method("ToyForCausalLM.get_parallel_plan", add=True)
        def get_parallel_plan(self):
            return {"model": "sharded"}

        @config.modify_init("ToyForCausalLM")
        def init(self, config):
            self.wired = True

        @config.replace_function("shared_helper")
        def shared_helper(x):
            return x - 100
        """
    )
    script = textwrap.dedent(
        """
        import patched_modeling_toy_gpu as m

        assert m.ToyMLP.FUSED
        assert not hasattr(m, "ToyTalker")
        assert m.ToyForSequenceClassification(None).forward(1, 2) == ("patched", 1, 2)
        lm = m.ToyForCausalLM(m.ToyConfig())
        assert lm.wired and lm.get_parallel_plan() == {"model": "sharded"}
        assert m.shared_helper(100) == 0
        assert m.ToyModel(m.ToyConfig()).local_import(5) == 5
        print("imported")
        """
    )

    result = project.run_subprocess(code=f"import sys; sys.path[:0] = ['zoo/toy/generated', '.']\n{script}")

    assert result.code == 0, result.err
    assert result.out.strip() == "imported"
