"""Padding-free forward passes: a micro-batch's samples laid end to end in one row.

    padded (B x T)        packed (1 x N: only the samples' real tokens)
    a a a . .             a a a b b b b c
    b b b b .     ──►     position ids  0 1 2 0 1 2 3 0   (restart at each sample)
    c . . . .             attention: causal within a sample, never across samples

The decoder's matmuls see only real tokens. Attention runs on each sample's slice of
the row (``segment_attention``: sdpa with ``is_causal``, on CPU and GPU alike), given
the samples' boundaries in the flash-attention keyword arguments transformers passes
down to every attention layer (``cu_seq_lens_q``/``_k``, ``max_length_q``/``_k``), so a
model loaded with ``flash_attention_2`` uses its variable-length kernel instead.
Per-token outputs go back to the padded layout (``Packing.unpack``), so the losses
and everything after them are unchanged.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface, PreTrainedModel

ATTENTION = "grouprl_segments"
"""The attention implementation ``use_packed_attention`` gives a model."""

VARLEN_KERNELS = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
"""Implementations that read the same boundaries themselves (transformers' flash path)."""


@dataclass(frozen=True)
class Packing:
    """Where each real token of a right-padded ``(B, T)`` batch goes in the packed row."""

    keep_BT: Tensor  # bool: the real tokens
    position_ids_1N: Tensor
    cu_seqlens: Tensor  # int32 (B + 1,): sample b is packed[cu[b]:cu[b + 1]]
    max_len: int

    @classmethod
    def of(cls, attention_mask_BT: Tensor) -> Packing:
        keep_BT = attention_mask_BT.bool()
        lengths = keep_BT.sum(dim=1)
        cu = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
        positions_BT = keep_BT.long().cumsum(dim=1) - 1
        return cls(keep_BT, positions_BT[keep_BT][None], cu, int(lengths.max()))

    def pack(self, x_BT: Tensor) -> Tensor:
        return x_BT[self.keep_BT][None]

    def unpack(self, x_1N: Tensor) -> Tensor:
        """``(B, T)`` with zeros at padding (differentiable)."""
        out = x_1N.new_zeros(self.keep_BT.shape)
        return out.masked_scatter(self.keep_BT, x_1N[0])

    def attention_kwargs(self) -> dict:
        return {
            "position_ids": self.position_ids_1N,
            "cu_seq_lens_q": self.cu_seqlens,
            "cu_seq_lens_k": self.cu_seqlens,
            "max_length_q": self.max_len,
            "max_length_k": self.max_len,
        }


def segment_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    cu_seq_lens_q: Tensor | None = None,
    sliding_window: int | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """Causal attention within each packed sample; ``query`` is ``(1, heads, N, dim)``,
    ``key`` and ``value`` may have fewer (grouped) heads. Returns ``(1, N, heads, dim)``."""
    if cu_seq_lens_q is None:
        raise RuntimeError(
            f"{ATTENTION} attention needs packed inputs (cu_seq_lens_q); call the model "
            "through grouprl.workers.packing"
        )
    if sliding_window is not None:
        raise NotImplementedError(
            "packed attention does not apply sliding windows; set train.packing=false for "
            "a model that uses them"
        )
    bounds = cu_seq_lens_q.tolist()
    gqa = query.shape[1] != key.shape[1]
    pieces = [
        F.scaled_dot_product_attention(
            query[:, :, start:end],
            key[:, :, start:end],
            value[:, :, start:end],
            dropout_p=dropout if module.training else 0.0,
            is_causal=True,
            scale=scaling,
            enable_gqa=gqa,
        )
        for start, end in itertools.pairwise(bounds)
        if end > start
    ]
    return torch.cat(pieces, dim=2).transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, segment_attention)


def use_packed_attention(model: PreTrainedModel) -> None:
    """Gives ``model`` per-sample attention for packed rows (a flash-attention model keeps
    its own kernel, which reads the same boundaries)."""
    if model.config._attn_implementation in VARLEN_KERNELS:
        return
    model.set_attn_implementation(ATTENTION)


def decoder_states(
    model: PreTrainedModel, input_ids_BT: Tensor, attention_mask_BT: Tensor, packing: Packing | None
) -> Tensor:
    """The last hidden states of ``model``'s decoder: ``(B, T, H)``, or ``(1, N, H)`` over
    the packed row when ``packing`` is given."""
    decoder = getattr(model, model.base_model_prefix)
    if packing is None:
        inputs = {"input_ids": input_ids_BT, "attention_mask": attention_mask_BT}
    else:
        inputs = {"input_ids": packing.pack(input_ids_BT), **packing.attention_kwargs()}
    return decoder(**inputs).last_hidden_state
