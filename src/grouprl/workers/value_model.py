"""The PPO critic: the policy's architecture with a scalar value head, its own optimizer.

The value model is ``AutoModelForTokenClassification`` with one label (no dropout)
loaded from ``critic.path``: from a causal LM the decoder weights load and the
head starts small and random (transformers' init); from a critic saved by
grouprl everything loads. Suffixes: B samples, T tokens, H hidden.

Values are aligned like logprobs: ``values_BT[b, t]`` is the value of the prefix
before token t, read from the hidden state at t - 1.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import Tensor
from transformers import AutoConfig, AutoModelForTokenClassification, PreTrainedModel

from grouprl.algo.aggregate import LossNorm, token_mean
from grouprl.algo.value import clipped_value_loss
from grouprl.assets import resolve_model_path
from grouprl.config.model_data import ModelConfig
from grouprl.config.train import CriticConfig
from grouprl.types import TrainingBatch
from grouprl.workers.model import ModelLoadError
from grouprl.workers.packing import Packing, decoder_states, use_packed_attention
from grouprl.workers.rank import SINGLE, Rank
from grouprl.workers.update import MicroBatching, run_updates


def load_critic(
    cfg: CriticConfig, model: ModelConfig, *, device: torch.device, weights: bool = True
):
    """The value model, or (``weights=False``) its structure on the meta device."""
    path = resolve_model_path(cfg.path)
    remote = model.trust_remote_code
    try:
        config = AutoConfig.from_pretrained(path, num_labels=1, trust_remote_code=remote)
        config.classifier_dropout = 0.0  # values must not be noisy
        if not weights:
            with torch.device("meta"):
                return AutoModelForTokenClassification.from_config(
                    config, dtype=torch.float32, trust_remote_code=remote
                )
        critic = AutoModelForTokenClassification.from_pretrained(
            path, config=config, dtype=torch.float32, trust_remote_code=remote
        )
    except (OSError, ValueError) as err:
        raise ModelLoadError(
            f"critic.path={cfg.path!r}: the value model could not be loaded ({err}). Give a "
            "causal LM of the policy's family (a local directory, a reachable hub name, or "
            "builtin:tiny-arith) or a critic saved in a grouprl checkpoint (RUN/checkpoints/"
            "step_N/critic)."
        ) from None
    return critic.to(device)


def token_values(critic: PreTrainedModel, batch: TrainingBatch, *, packed: bool = False) -> Tensor:
    """The value of the prefix before each loss-mask token; 0 elsewhere."""
    packing = Packing.of(batch.attention_mask_BT) if packed else None
    hidden = decoder_states(critic, batch.input_ids_BT, batch.attention_mask_BT, packing)
    head_BT = critic.get_submodule("score")(hidden).squeeze(-1).float()
    if packing is not None:
        head_BT = packing.unpack(head_BT)
    values_BT = torch.zeros_like(head_BT)
    values_BT[:, 1:] = head_BT[:, :-1]
    return values_BT * batch.loss_mask_BT


class ValueScorer(torch.nn.Module):
    """``token_values`` as one module: the FSDP2 root unit of a sharded critic, so its
    embeddings and value head are gathered for the whole computation."""

    def __init__(self, critic: PreTrainedModel, *, packed: bool = False) -> None:
        super().__init__()
        self.critic, self.packed = critic, packed
        if packed:
            use_packed_attention(critic)

    def forward(self, batch: TrainingBatch) -> Tensor:
        return token_values(self.critic, batch, packed=self.packed)


def explained_variance(values_BT: Tensor, returns_BT: Tensor, mask_BT: Tensor) -> float:
    """1 - Var(R - V) / Var(R) over masked tokens: 1 is a perfect critic, <= 0 a useless one."""
    count = mask_BT.sum().clamp(min=1)

    def var(x_BT: Tensor) -> Tensor:
        mean = (x_BT * mask_BT).sum() / count
        return (((x_BT - mean) * mask_BT) ** 2).sum() / count

    return float(1 - var(returns_BT - values_BT) / var(returns_BT).clamp(min=1e-12))


def critic_update(
    *,
    scorer: ValueScorer,
    optimizer: torch.optim.Optimizer,
    batch: TrainingBatch,
    cfg: CriticConfig,
    num_iterations: int,
    mini_batch_size: int,
    micro: MicroBatching,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    rank: Rank = SINGLE,
) -> dict[str, float]:
    """Regress values on ``batch.returns_BT`` with the same schedule as the policy.
    Needs ``batch.old_values_BT`` (the values the advantages were computed with)."""
    old_values_BT, returns_BT = _critic_targets(batch)
    explained = explained_variance(old_values_BT, returns_BT, batch.loss_mask_BT)

    def micro_loss(micro: TrainingBatch, norm: LossNorm, iteration: int):
        del iteration
        with autocast():
            values_BT = scorer(micro)
        micro_old_values_BT, micro_returns_BT = _critic_targets(micro)
        loss_BT, clipped_BT = clipped_value_loss(
            values_BT=values_BT,
            old_values_BT=micro_old_values_BT,
            returns_BT=micro_returns_BT,
            clip=cfg.value_clip,
        )
        metrics = {"clip_frac": token_mean(clipped_BT.float(), micro.loss_mask_BT, norm=norm)}
        return token_mean(loss_BT, micro.loss_mask_BT, norm=norm), metrics

    metrics = run_updates(
        model=scorer,
        optimizer=optimizer,
        batch=batch,
        micro_loss=micro_loss,
        num_iterations=num_iterations,
        mini_batch_size=mini_batch_size,
        micro=micro,
        max_grad_norm=cfg.max_grad_norm,
        rank=rank,
    )
    out = {f"critic/{name}": value for name, value in metrics.items()}
    out["critic/explained_variance"] = explained
    out["critic/value_mean"] = float(
        (old_values_BT * batch.loss_mask_BT).sum() / batch.loss_mask_BT.sum().clamp(min=1)
    )
    return out


def _critic_targets(batch: TrainingBatch) -> tuple[Tensor, Tensor]:
    """``old_values_BT`` and ``returns_BT``, which a critic update needs."""
    if batch.old_values_BT is None or batch.returns_BT is None:
        raise ValueError("a critic update needs the batch's old_values_BT and returns_BT")
    return batch.old_values_BT, batch.returns_BT
