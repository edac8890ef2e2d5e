"""GLM-MoE-DSA, NPU backend: the GPU config's patches, helpers and imports, for an Ascend build.

Device kernels are chosen by binding op slots (see models.ops), so this
sibling inherits every patch and differs in its target file; on Ascend the
"npu" kernel family (torch_npu RMSNorm, SwiGLU, RoPE) is bound to those slots.
"""

from modelgraft.generator import PatchConfig

from .glm_moe_dsa_gpu_patch_gen_config import config as gpu_config

config = PatchConfig(
    source_module="transformers.models.glm_moe_dsa.modeling_glm_moe_dsa",
    target_file="patched_modeling_glm_moe_dsa_npu.py",
    description="GLM-MoE-DSA for NPU: the GPU config's slot guards; NPU kernels bind to the same slots",
)
config.inherit_from(gpu_config)
