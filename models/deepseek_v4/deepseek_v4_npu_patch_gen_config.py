"""DeepSeek-V4, NPU backend: the GPU config's patches, helpers and imports, for an Ascend build.

Device kernels are chosen by binding op slots (see models.ops), so this sibling inherits every patch
and differs in its target file; on Ascend the "npu" kernel family is bound to the slots it serves, and
the others run upstream's code or a portable kernel.
"""

from modelgraft.generator import PatchConfig

from .deepseek_v4_gpu_patch_gen_config import config as gpu_config

config = PatchConfig(
    source_module="transformers.models.deepseek_v4.modeling_deepseek_v4",
    target_file="patched_modeling_deepseek_v4_npu.py",
    description="DeepSeek-V4 for NPU: the GPU config's slot guards; NPU kernels bind to the same slots",
)
config.inherit_from(gpu_config)
