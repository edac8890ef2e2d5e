"""Op slots that generated modeling code consults, the kernels that can fill them, and how to bind them.

Generated code imports the slot instances from here; training code builds an ``OpsConfig`` and binds it
(``bind_ops`` / ``bound_ops``, or through ``modelgraft.models.loader.build_model``) before building a model.
"""

from modelgraft.models.ops.binding import ModelOps, attach_ops, bind_ops, bound_ops, current_ops, unbind_ops
from modelgraft.models.ops.config import OpsConfig
from modelgraft.models.ops.errors import KernelUnavailableError, OpsConfigError, OpsError, UnboundSlotError
from modelgraft.models.ops.kernels import KERNEL_FAMILIES, kernel_names
from modelgraft.models.ops.slots import (
    SLOTS,
    BoundKernel,
    OpSlot,
    activation_slot,
    causal_lm_loss_slot,
    correction_bias_router_slot,
    dsa_indexer_slot,
    gated_mlp_slot,
    glu_activation_slot,
    group_limited_router_slot,
    hash_router_slot,
    hyper_connection_post_slot,
    hyper_connection_slot,
    hyper_head_slot,
    layer_norm_slot,
    lightning_indexer_slot,
    load_balancing_loss_slot,
    moe_experts_slot,
    rms_norm_slot,
    rope_slot,
    rope_vision_slot,
    sequence_classification_loss_slot,
    sinkhorn_slot,
    softmax_topk_router_slot,
    topk_softmax_router_slot,
)

__all__ = [
    "KERNEL_FAMILIES",
    "SLOTS",
    "BoundKernel",
    "KernelUnavailableError",
    "ModelOps",
    "OpSlot",
    "OpsConfig",
    "OpsConfigError",
    "OpsError",
    "UnboundSlotError",
    "activation_slot",
    "attach_ops",
    "bind_ops",
    "bound_ops",
    "causal_lm_loss_slot",
    "correction_bias_router_slot",
    "current_ops",
    "dsa_indexer_slot",
    "gated_mlp_slot",
    "glu_activation_slot",
    "group_limited_router_slot",
    "hash_router_slot",
    "hyper_connection_post_slot",
    "hyper_connection_slot",
    "hyper_head_slot",
    "kernel_names",
    "layer_norm_slot",
    "lightning_indexer_slot",
    "load_balancing_loss_slot",
    "moe_experts_slot",
    "rms_norm_slot",
    "rope_slot",
    "rope_vision_slot",
    "sequence_classification_loss_slot",
    "sinkhorn_slot",
    "softmax_topk_router_slot",
    "topk_softmax_router_slot",
    "unbind_ops",
]
