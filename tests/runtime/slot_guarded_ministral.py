"""A miniature of a generated modeling file: upstream Ministral whose ``ForCausalLM.forward`` has the loss guard.

The real generated files are written by the generator; this one lets the runtime tests drive the
``causal_lm_loss_slot`` contract through a whole model without depending on them.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.ministral import modeling_ministral

from modelgraft.models.ops import causal_lm_loss_slot


class MinistralForCausalLM(modeling_ministral.MinistralForCausalLM):
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Any = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        hidden_states = outputs.last_hidden_state[:, slice_indices, :]
        if labels is not None and causal_lm_loss_slot.use_non_eager_impl:
            loss, logits = causal_lm_loss_slot(
                hidden_states, self.lm_head.weight, labels, vocab_size=self.config.vocab_size, **kwargs
            )
        else:
            logits = self.lm_head(hidden_states)
            loss = None
            if labels is not None:
                loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
