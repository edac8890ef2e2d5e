"""Causal-LM loss fused with the lm_head projection, computed in row chunks (pure torch, any device).

The full ``[tokens, vocab]`` logits of a large-vocabulary model dominate a training step's peak
memory. Here each chunk of rows is projected, turned into its loss and into its gradients w.r.t. the
hidden states and the lm_head weight during the forward pass, then dropped: no logits survive the
chunk, and backward only rescales the stored gradients. Peak extra memory is about one chunk's fp32
logits plus the two gradients, which training allocates anyway.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from modelgraft.models.ops.kernels.loss_inputs import divide_by_num_items, flat_rows_and_targets

#: Rows of hidden states projected at once; the transient logits are ``chunk_size x vocab`` fp32.
DEFAULT_CHUNK_SIZE = 256


class _ChunkedLinearCrossEntropySum(torch.autograd.Function):
    """Summed cross entropy of ``hidden @ weight.T`` against ``targets``, gradients computed in forward."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        ignore_index: int,
        softcap: float | None,
        chunk_size: int,
        grad_enabled: bool,
    ) -> torch.Tensor:
        # needs_input_grad ignores no_grad mode, so the caller says whether autograd is recording.
        want_hidden_grad = grad_enabled and ctx.needs_input_grad[0]
        want_weight_grad = grad_enabled and ctx.needs_input_grad[1]
        want_bias_grad = grad_enabled and bias is not None and ctx.needs_input_grad[2]
        grad_hidden = torch.empty_like(hidden) if want_hidden_grad else None
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if want_bias_grad else None
        grad_weight = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_weight_grad else None
        )
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)

        for start in range(0, hidden.shape[0], chunk_size):
            rows = hidden[start : start + chunk_size]
            chunk_targets = targets[start : start + chunk_size]
            # Project in the model dtype and upcast afterwards, as the upstream lm_head + loss does.
            logits = F.linear(rows, weight, bias).float()
            if softcap is not None:
                capped = torch.tanh(logits / softcap)
                logits = capped * softcap
            valid = chunk_targets != ignore_index
            safe_targets = torch.where(valid, chunk_targets, 0).unsqueeze(1)
            log_norm = torch.logsumexp(logits, dim=-1, keepdim=True)
            target_logits = logits.gather(1, safe_targets)
            total += ((log_norm - target_logits).squeeze(1) * valid).sum()
            if not (want_hidden_grad or want_weight_grad or want_bias_grad):
                continue

            # d(loss)/d(logits) = softmax - one_hot, built in the logits buffer to keep one chunk alive.
            grad_logits = logits.sub_(log_norm).exp_()
            grad_logits.scatter_add_(1, safe_targets, torch.full_like(target_logits, -1.0))
            grad_logits.mul_(valid.unsqueeze(1))
            if softcap is not None:
                grad_logits.mul_(1.0 - capped * capped)
            grad_logits = grad_logits.to(hidden.dtype)
            if grad_hidden is not None:
                grad_hidden[start : start + chunk_size] = grad_logits @ weight
            if grad_weight is not None:
                # In place: a plain `+=` would first build the whole [vocab, hidden] product.
                grad_weight.addmm_(grad_logits.T.float(), rows.float())
            if grad_bias is not None:
                grad_bias += grad_logits.float().sum(0)

        ctx.save_for_backward(
            grad_hidden if grad_hidden is not None else torch.empty(0),
            grad_weight.to(weight.dtype) if grad_weight is not None else torch.empty(0),
            grad_bias.to(bias.dtype) if grad_bias is not None else torch.empty(0),
        )
        ctx.has_grads = (want_hidden_grad, want_weight_grad, want_bias_grad)
        return total

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        want_hidden_grad, want_weight_grad, want_bias_grad = ctx.has_grads
        return (
            grad_hidden * grad_output.to(grad_hidden.dtype) if want_hidden_grad else None,
            grad_weight * grad_output.to(grad_weight.dtype) if want_weight_grad else None,
            grad_bias * grad_output.to(grad_bias.dtype) if want_bias_grad else None,
            None,
            None,
            None,
            None,
            None,
        )


def causal_lm_loss(
    hidden_states: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    *,
    vocab_size: int,
    num_items_in_batch: Any = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    final_logit_softcapping: float | None = None,
    lm_head_bias: torch.Tensor | None = None,
    softcap_in_fp32: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The ``causal_lm_loss`` slot contract without materializing logits; returns ``(loss, None)``.

    Same targets and reduction as the eager reference: labels shifted left unless ``shift_labels`` is
    given, mean over non-ignored targets, or sum / ``num_items_in_batch`` when given. The soft-cap is always
    applied to fp32 logits, so ``softcap_in_fp32`` changes nothing here.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    hidden, targets = flat_rows_and_targets(
        hidden_states,
        lm_head_weight,
        labels,
        vocab_size=vocab_size,
        ignore_index=ignore_index,
        shift_labels=shift_labels,
    )
    summed = _ChunkedLinearCrossEntropySum.apply(
        hidden,
        lm_head_weight,
        lm_head_bias,
        targets,
        ignore_index,
        final_logit_softcapping,
        chunk_size,
        torch.is_grad_enabled(),
    )
    if num_items_in_batch is None:
        return summed / (targets != ignore_index).sum(), None
    return divide_by_num_items(summed, num_items_in_batch), None
