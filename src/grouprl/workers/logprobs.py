"""Token logprobs and entropy from a causal LM without full-vocabulary float32 logits.

Suffixes: B batch, T tokens, H hidden, V vocab.

The decoder runs once over the batch; the LM head, log-softmax and gather run
over chunks of ``chunk_tokens`` positions. With gradients on, each chunk is
recomputed in the backward pass (activation checkpointing), so at most one
chunk of V-sized activations is alive at a time.

``TokenScorer`` wraps this as a module: on a sharded policy it is FSDP2's root unit,
whose forward keeps the embeddings and head gathered while the chunks use them.

Tokens are scored at the sampling temperature: ``log_softmax(logits / T)`` with
T = ``rollout.temperature``, the distribution the engine drew from, so the PPO ratio,
the gradient and the entropy are the sampler's policy's (TRL and verl divide by T the
same way). Top-k and top-p are not applied here (as in TRL and verl): see
``engines/vllm_engine.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from grouprl.algo.distill import top_k_forward_kl
from grouprl.config.schema import RunConfig
from grouprl.types import TrainingBatch
from grouprl.workers.packing import Packing, decoder_states, use_packed_attention

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def _chunk_logprobs(
    hidden_NH: Tensor,
    targets_N: Tensor,
    weight_VH: Tensor,
    bias_V: Tensor | None,
    temperature: float,
    entropy_grad: bool,
    top_ids_NK: Tensor | None = None,
    top_logprobs_NK: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    logits_NV = F.linear(hidden_NH, weight_VH, bias_V).float()
    if temperature != 1.0:
        # in place: no second V-sized tensor per chunk (the linear's backward does not
        # need its output)
        logits_NV = logits_NV.div_(temperature)
    logp_NV = torch.log_softmax(logits_NV, dim=-1)
    picked_N = logp_NV.gather(-1, targets_N.unsqueeze(-1)).squeeze(-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy_N = -(logp_NV.exp() * logp_NV).sum(-1)
    forward_N = None
    if top_ids_NK is not None and top_logprobs_NK is not None:
        forward_N = top_k_forward_kl(
            logp_NV, top_ids_NK=top_ids_NK, top_logprobs_NK=top_logprobs_NK
        )
    return picked_N, entropy_N, forward_N


def token_logprobs(
    model: PreTrainedModel,
    *,
    input_ids_BT: Tensor,
    attention_mask_BT: Tensor,
    chunk_tokens: int,
    score_mask_BT: Tensor | None = None,
    packed: bool = False,
    temperature: float = 1.0,
    entropy_grad: bool = False,
    teacher_top: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Logprob of each token given its prefix, and the policy's entropy there, both of
    ``softmax(logits / temperature)`` (the sampling temperature: module docstring); the
    entropy with its gradient only with ``entropy_grad`` (an entropy bonus). Third: with
    ``teacher_top`` (``TrainingBatch.teacher_top``: the teacher's top-k ids and logprobs,
    ``(B, T, K)``), the forward KL from them to the policy (``algo/distill.py``), else None.

    Entry ``[b, t]`` is about token ``input_ids[b, t]`` predicted from positions
    ``< t``; column 0 is 0 (nothing predicts the first token). Right padding.
    With ``score_mask_BT``, only its nonzero positions are scored (the rest are
    0): the LM head never runs over prompt tokens, which matters with a
    150k-token vocabulary and long prompts. ``packed``: the decoder runs over the
    samples laid end to end, without padding (``workers/packing.py``).
    """
    if not temperature > 0:
        raise ValueError(f"scoring needs a temperature > 0, got {temperature}")
    wanted_BT = attention_mask_BT.bool() if score_mask_BT is None else score_mask_BT.bool()
    wanted_BT = wanted_BT.clone()
    wanted_BT[:, 0] = False  # in a packed row too: nothing predicts a sample's first token
    packing = Packing.of(attention_mask_BT) if packed else None
    hidden_BTH = decoder_states(model, input_ids_BT, attention_mask_BT, packing)
    if packing is not None:  # one row of the real tokens: B = 1, T = N
        input_ids_BT, wanted_BT = packing.pack(input_ids_BT), packing.pack(wanted_BT)
        if teacher_top is not None:
            teacher_top = (packing.pack(teacher_top[0]), packing.pack(teacher_top[1]))
    head = model.get_output_embeddings()
    if head is None:
        raise TypeError(f"{type(model).__name__} has no LM head (output embeddings) to score")
    # position t - 1 predicts token t
    hidden_NH = hidden_BTH[:, :-1][wanted_BT[:, 1:]]
    targets_N = input_ids_BT[wanted_BT]
    top_N = None if teacher_top is None else (teacher_top[0][wanted_BT], teacher_top[1][wanted_BT])
    picked, entropies, forwards = _chunks(
        hidden_NH,
        targets_N,
        top_N,
        head=(head.weight, head.bias),
        chunk_tokens=chunk_tokens,
        temperature=temperature,
        entropy_grad=entropy_grad,
    )
    logprobs_BT = hidden_BTH.new_zeros(wanted_BT.shape, dtype=torch.float32)
    entropy_BT = torch.zeros_like(logprobs_BT)
    forward_BT = None if teacher_top is None else torch.zeros_like(logprobs_BT)
    if picked:
        logprobs_BT = logprobs_BT.masked_scatter(wanted_BT, torch.cat(picked))
        entropy_BT = entropy_BT.masked_scatter(wanted_BT, torch.cat(entropies))
        if forward_BT is not None:
            forward_BT = forward_BT.masked_scatter(wanted_BT, torch.cat(forwards))
    elif torch.is_grad_enabled():
        # nothing scored, but the backward must still reach every weight: sharded ranks
        # reduce their gradients together and would wait forever for this one
        anchor = hidden_BTH.sum() + sum(p.sum() for p in head.parameters())
        logprobs_BT = logprobs_BT + 0.0 * anchor
    if packing is not None:
        unpacked = None if forward_BT is None else packing.unpack(forward_BT)
        return packing.unpack(logprobs_BT), packing.unpack(entropy_BT), unpacked
    return logprobs_BT, entropy_BT, forward_BT


def _chunks(
    hidden_NH: Tensor,
    targets_N: Tensor,
    top_N: tuple[Tensor, Tensor] | None,
    *,
    head: tuple[Tensor, Tensor | None],
    chunk_tokens: int,
    temperature: float,
    entropy_grad: bool,
) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """``_chunk_logprobs`` over chunks of ``chunk_tokens`` positions, each recomputed in
    the backward pass when gradients are on (``head``: the LM head's weight and bias):
    their logprobs, entropies and forward KLs (none without ``top_N``)."""
    picked, entropies, forwards = [], [], []
    for start in range(0, hidden_NH.shape[0], chunk_tokens):
        part = slice(start, start + chunk_tokens)
        args = (
            hidden_NH[part],
            targets_N[part],
            *head,
            temperature,
            entropy_grad,
            *(() if top_N is None else (top_N[0][part], top_N[1][part])),
        )
        if torch.is_grad_enabled():
            p, e, f = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
        else:
            p, e, f = _chunk_logprobs(*args)
        picked.append(p)
        entropies.append(e)
        forwards += [] if f is None else [f]
    return picked, entropies, forwards


class TokenScorer(torch.nn.Module):
    """``token_logprobs`` of a causal LM as one module (see the module docstring).
    ``temperature``: the sampling temperature, ``rollout.temperature`` for every role
    that scores sampled tokens (policy, old, reference). ``entropy_grad``: the entropy
    keeps its gradient (an entropy bonus trains through it)."""

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        chunk_tokens: int,
        packed: bool = False,
        temperature: float = 1.0,
        entropy_grad: bool = False,
    ) -> None:
        super().__init__()
        self.model = model
        self.chunk_tokens, self.packed, self.temperature = chunk_tokens, packed, temperature
        self.entropy_grad = entropy_grad
        if packed:
            use_packed_attention(model)

    @classmethod
    def of(cls, model: PreTrainedModel, cfg: RunConfig) -> TokenScorer:
        """The run's scorer of ``model``: ``train``'s chunks and packing, at the sampling
        temperature (policy, old and reference logprobs are all of it), with the entropy's
        gradient when the run has an entropy bonus."""
        algo = cfg.algo
        return cls(
            model,
            chunk_tokens=cfg.train.logprob_chunk_tokens,
            packed=cfg.train.packing,
            temperature=cfg.rollout.temperature,
            entropy_grad=algo.entropy_coef > 0 or algo.entropy_target is not None,
        )

    def loss_logprobs(self, batch: TrainingBatch) -> Tensor:
        """Float32 logprobs of ``batch``'s loss tokens (0 elsewhere), as wide as ``batch``."""
        logprobs_BT, _, _ = self(batch.input_ids_BT, batch.attention_mask_BT, batch.loss_mask_BT)
        return logprobs_BT.float()

    def forward(
        self,
        input_ids_BT: Tensor,
        attention_mask_BT: Tensor,
        score_mask_BT: Tensor | None = None,
        teacher_top: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        return token_logprobs(
            self.model,
            input_ids_BT=input_ids_BT,
            attention_mask_BT=attention_mask_BT,
            chunk_tokens=self.chunk_tokens,
            score_mask_BT=score_mask_BT,
            packed=self.packed,
            temperature=self.temperature,
            entropy_grad=self.entropy_grad,
            teacher_top=teacher_top,
        )
