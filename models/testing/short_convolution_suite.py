"""The checks a short-convolution hybrid adds to its dense or MoE parity suite (a scaffold of lfm2, lfm2_moe).

The mixer gates a depthwise causal conv and has no recurrence of its own, so of the Gated DeltaNet suite's checks
(modelgraft.models.testing.gated_delta_net_suite) two apply: the decode step, where the ``causal_conv1d_update``
slot's reference kernel is bound alone on a prefill then one cached token (a training step never calls it), and,
where upstream's mixer hands packed documents' ``cu_seq_lens_q`` on to its conv, the ``chunked_delta`` conv giving
each document its own outputs: upstream's torch conv ignores the boundaries, and the generated conv's eager path
refuses more than one document (docs/design.md, "Where the code departs from the design contract").

Mix it in first: ``class TestLfm2Parity(ShortConvolutionSuite, DenseParitySuite)``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch

from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, bound_ops
from modelgraft.models.testing.gated_delta_net_suite import (
    check_cached_decode_step,
    check_packed_documents,
    decode_step_reason,
)

__all__ = ["CHUNKED_CONV", "ShortConvolutionSuite"]

#: The chunked_delta CPU family on the one slot of it a short convolution calls.
CHUNKED_CONV = OpsConfig({"causal_conv1d": "chunked_delta"})

#: The decode-step slot of a short convolution.
_DECODE_SLOT = "causal_conv1d_update"


class ShortConvolutionSuite:
    """Decode-step and packed-document checks of a short-convolution hybrid; subclasses also derive a parity
    suite."""

    model: ClassVar[Any]
    #: The mixer class that hands packed documents' boundaries on to its conv (the fit's ``packed``), or None.
    packed_mixer: ClassVar[str | None] = None

    def _unreachable(self, slot: str) -> str | None:
        if slot == _DECODE_SLOT:
            return decode_step_reason(slot, "test_reference_conv_update_matches_upstreams_cached_decode_step")
        return super()._unreachable(slot)  # type: ignore[misc]

    def test_reference_conv_update_matches_upstreams_cached_decode_step(self, backend: str) -> None:
        """Prefill then one token from the cache: causal_conv1d_update's reference kernel, bound alone and called."""
        check_cached_decode_step(self.model, backend, _DECODE_SLOT)

    def test_packed_documents_through_the_chunked_delta_conv_give_each_documents_own_outputs(
        self, backend: str
    ) -> None:
        """With cu_seq_lens_q, each document's conv window starts afresh in the mixer."""
        if self.packed_mixer is None:
            pytest.skip(f"upstream's {self.model.causal_lm} hands no cu_seq_lens_q to its conv")
        check_packed_documents(self.model, backend, self.packed_mixer, CHUNKED_CONV)

    def test_packed_documents_on_the_eager_conv_are_refused_naming_the_kernels_that_keep_them_apart(
        self, backend: str
    ) -> None:
        """Upstream's torch conv would read the first document's last inputs into the second one's first taps,
        and nothing upstream refuses ``cu_seq_lens_q``: the generated conv's eager path does."""
        if self.packed_mixer is None:
            pytest.skip(f"upstream's {self.model.causal_lm} hands no cu_seq_lens_q to its conv")
        model = build_model(self.model.config(), architecture=self.model.causal_lm, backend=backend).eval()
        mixer = next(module for module in model.modules() if type(module).__name__ == self.packed_mixer)
        hidden = torch.randn(1, 12, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
        cu_seqlens = torch.tensor([0, 5, 12], dtype=torch.int32)
        with bound_ops(OpsConfig()), torch.no_grad(), pytest.raises(ValueError, match="bind the chunked_delta"):
            mixer(hidden_states=hidden, cu_seq_lens_q=cu_seqlens, cu_seq_lens_k=cu_seqlens)
