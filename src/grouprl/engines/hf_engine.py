"""Rollouts with a plain transformers model: a KV-cached sampling loop, no vLLM.

Suffixes: B rows (prompt x sample), T tokens, V vocab.

The loop is written by hand rather than with ``model.generate`` so that every
row draws from its own ``torch.Generator``: sample j of prompt i uses seed
``settings.seed + i * n + j`` (the same streams vLLM gives a request seeded
``seed + i * n``), so a completion does not depend on how prompts are batched. Each row
stops at its prompt's own max_tokens (``SamplingSettings.prompt_max_tokens``).

Logprobs are those of the distribution each token was drawn from, as vLLM's
``processed_logprobs`` (``engines/vllm_engine.py``) gives them (``processed_logits``);
of the raw logits when greedy.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from grouprl.engines.base import (
    NamedTensors,
    PushLedger,
    SamplingSettings,
    TopLogprobs,
    TwoStepPush,
    replicate,
)
from grouprl.seeds import request_seed
from grouprl.types import Completion


class HFEngine(TwoStepPush):
    """A rollout engine over its own copy of a transformers causal LM.

    The constructor deep-copies ``model`` onto ``device`` (cast to ``dtype`` if
    given); the trainer's model is never touched. A push is staged into a second copy of
    the parameters (``stage_weights``: cast as needed) and applied by swapping the two
    (``apply_weights``), so the part of a push that must wait for generation to stop is
    a pointer swap per parameter.
    ``max_batch_rows`` bounds how many rows (prompt x sample) run through one
    forward pass.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        device: torch.device | str,
        dtype: torch.dtype | None = None,
        max_batch_rows: int = 256,
    ) -> None:
        self.device = torch.device(device)
        self.model = copy.deepcopy(model).to(device=self.device, dtype=dtype)
        self.model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.max_batch_rows = max_batch_rows
        self._params = dict(self.model.named_parameters(remove_duplicate=False))
        self._ledger = PushLedger("hf")
        self._staged: dict[int, Tensor] = {}  # id(parameter) -> its staging copy
        self._unique: dict[int, torch.nn.Parameter] = {}  # id(parameter) -> parameter
        self._eos_ids = _eos_token_ids(self.model, tokenizer)
        pad = tokenizer.pad_token_id
        self._pad_id = pad if pad is not None else min(self._eos_ids)

    @torch.no_grad()
    def generate(
        self, prompts: list[list[int]], settings: SamplingSettings
    ) -> list[list[Completion]]:
        n = settings.group_size
        per_prompt = 1 if settings.is_greedy else n
        max_tokens = settings.prompt_max_tokens(len(prompts))
        rows = [
            _Row(prompt, request_seed(settings.seed, i, n, j), max_tokens[i])
            for i, prompt in enumerate(prompts)
            for j in range(per_prompt)
        ]
        done: list[Completion] = []
        for start in range(0, len(rows), self.max_batch_rows):
            done += self._generate_rows(rows[start : start + self.max_batch_rows], settings)
        groups = [done[i * per_prompt : (i + 1) * per_prompt] for i in range(len(prompts))]
        return [g if per_prompt == n else replicate(g[0], n) for g in groups]

    def token_logprobs(self, ids: list[list[int]], starts: list[int]) -> list[list[float]]:
        """``teacher.Teacher.token_logprobs`` on this engine: ``top_logprobs`` with k = 0."""
        return [given for given, _, _ in self.top_logprobs(ids, starts, 0)]

    @torch.no_grad()
    def top_logprobs(self, ids: list[list[int]], starts: list[int], k: int) -> list[TopLogprobs]:
        """``teacher.Teacher.top_logprobs`` on this engine: one forward pass per batch of
        sequences (left-padded, so every sequence ends in the last column and only the
        last K positions' logits are computed; at most ``max_batch_rows`` sequences and
        ``LOGITS_BUDGET`` logits a batch), ``log_softmax`` in float32 at temperature 1, the
        given token gathered, and the top ``k``."""
        model = self.model
        if model is None:
            raise RuntimeError("the hf engine was closed")
        vocab = model.get_output_embeddings().weight.shape[0]
        out: list[TopLogprobs] = []
        for part in _score_batches(ids, starts, vocab=vocab, max_rows=self.max_batch_rows):
            rows, begin = ids[part], starts[part]
            input_ids_BT, attention_BT = _left_pad(rows, self._pad_id, self.device)
            position_BT = (attention_BT.cumsum(-1) - 1).clamp(min=0)
            # position t - 1 predicts token t: the last K positions cover every scored one
            K = max(len(s) - b for s, b in zip(rows, begin, strict=True)) + 1
            logits_BKV = model(
                input_ids=input_ids_BT,
                attention_mask=attention_BT,
                position_ids=position_BT,
                logits_to_keep=K,
            ).logits
            for b, (seq, start) in enumerate(zip(rows, begin, strict=True)):
                n = len(seq) - start
                logp_NV = logits_BKV[b, K - 1 - n : K - 1].float().log_softmax(-1)
                target_N = torch.tensor(seq[start:], device=self.device)
                given = logp_NV.gather(1, target_N[:, None])[:, 0].tolist()
                if k == 0:  # token_logprobs: no top k to build
                    out.append((given, [], []))
                    continue
                top = logp_NV.topk(k, dim=-1)
                out.append((given, top.indices.tolist(), top.values.tolist()))
        return out

    @torch.no_grad()
    def _stage(
        self, named_tensors: NamedTensors, *, version: int, last: bool, lora_scaling: float | None
    ) -> None:
        """Copy tensors into the staging copy of the parameters of the same names (cast as
        needed; generation never reads it); ``last``: every parameter must be staged by
        now (``RolloutEngine``)."""
        merged = self._merged(named_tensors, version=version, last=last, lora_scaling=lora_scaling)
        with self._ledger.stage(version, last=last):
            named = list(merged)
            unknown = sorted(name for name, _ in named if name not in self._params)
            if unknown:
                raise ValueError(
                    f"weight push to the hf engine names unknown parameters {unknown[:5]}; "
                    "pass `model.named_parameters()` of the same architecture"
                )
            wrong = [n for n, t in named if t.shape != self._params[n].shape]
            if wrong:  # checked up front: copy_ would broadcast silently, or fail half-way
                raise ValueError(f"weight push to the hf engine has wrong shapes for {wrong[:5]}")
            for name, tensor in named:
                self._ledger.add(name, tuple(tensor.shape))
                self._staged_tensor(name).copy_(tensor.detach())
            if last:
                written = {id(self._params[name]) for name in self._ledger.names}
                missing = sorted(n for n, p in self._params.items() if id(p) not in written)
                if missing:
                    raise ValueError(
                        f"weight push to the hf engine misses parameters {missing[:5]} "
                        f"({len(missing)}); pushes are all-or-nothing so no layer serves "
                        "stale weights"
                    )

    @torch.no_grad()
    def apply_weights(self, version: int, *, nbytes: int = 0) -> None:
        """Swap the staged copy in: each parameter's storage and its staging copy trade
        places (no copy; the old values become the next push's staging space)."""
        self._ledger.take(version)
        for key, staged in self._staged.items():
            param = self._unique[key]
            param.data, self._staged[key] = staged, param.data
        self._version = version

    def _staged_tensor(self, name: str) -> Tensor:
        """The staging copy of parameter ``name`` (a tied weight's names share one),
        allocated at the first push."""
        param = self._params[name]
        key = id(param)
        if key not in self._staged:
            self._staged[key] = torch.empty_like(param)
            self._unique[key] = param
        return self._staged[key]

    def close(self) -> None:
        self.model = None
        self._params, self._staged, self._unique = {}, {}, {}

    # --- internals -------------------------------------------------------------------------

    def _generate_rows(self, rows: list[_Row], settings: SamplingSettings) -> list[Completion]:
        """One batch of rows, each stopping at EOS (unless ``ignore_eos``) or at its own
        max_tokens; a row draws once per step, so its tokens do not depend on the others."""
        model = self.model
        if model is None:
            raise RuntimeError("the hf engine was closed")
        B = len(rows)
        generators = [_generator(row.seed, self.device) for row in rows]
        input_ids_BT, attention_BT = _left_pad([r.prompt for r in rows], self._pad_id, self.device)
        position_BT = (attention_BT.cumsum(-1) - 1).clamp(min=0)
        eos_ids = torch.tensor(sorted(self._eos_ids), device=self.device)
        limit_B = torch.tensor([row.max_tokens for row in rows], device=self.device)
        steps = int(limit_B.max())

        tokens: list[list[int]] = [[] for _ in range(B)]
        logprobs: list[list[float]] = [[] for _ in range(B)]
        done_B = torch.zeros(B, dtype=torch.bool, device=self.device)
        out = model(
            input_ids=input_ids_BT,
            attention_mask=attention_BT,
            position_ids=position_BT,
            use_cache=True,
            logits_to_keep=1,
        )
        next_position_B = position_BT[:, -1] + 1
        for step in range(steps):
            processed_BV = processed_logits(out.logits[:, -1].float(), settings=settings)
            token_B = _draw(processed_BV, greedy=settings.is_greedy, generators=generators)
            logprob_B = processed_BV.log_softmax(-1).gather(1, token_B[:, None])[:, 0]
            for b in (~done_B).nonzero()[:, 0].tolist():
                tokens[b].append(int(token_B[b]))
                logprobs[b].append(float(logprob_B[b]))
            if not settings.ignore_eos:
                done_B |= torch.isin(token_B, eos_ids)
            done_B |= limit_B <= step + 1
            if bool(done_B.all()):
                break
            token_B = token_B.masked_fill(done_B, self._pad_id)
            attention_BT = torch.cat([attention_BT, torch.ones_like(attention_BT[:, :1])], dim=1)
            out = model(
                input_ids=token_B[:, None],
                attention_mask=attention_BT,
                position_ids=next_position_B[:, None],
                past_key_values=out.past_key_values,
                use_cache=True,
                logits_to_keep=1,
            )
            next_position_B = next_position_B + 1
        return [
            self._completion(t, lp, ignore_eos=settings.ignore_eos)
            for t, lp in zip(tokens, logprobs, strict=True)
        ]

    def _completion(
        self, token_ids: list[int], logprobs: list[float], *, ignore_eos: bool
    ) -> Completion:
        stopped = not ignore_eos and bool(token_ids) and token_ids[-1] in self._eos_ids
        return Completion(
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason="stop" if stopped else "length",
            text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
        )


LOGITS_BUDGET = 1 << 28
"""Logits one scoring batch may hold (B x K x V: 0.5 GiB in bfloat16): a 150k-token
vocabulary over long completions would otherwise take tens of GiB."""


def _score_batches(
    ids: list[list[int]], starts: list[int], *, vocab: int, max_rows: int
) -> list[slice]:
    """Consecutive batches of sequences whose scored positions' logits (rows x the
    longest scored span + 1, x ``vocab``) stay within ``LOGITS_BUDGET``, at most
    ``max_rows`` rows each, at least one."""
    out, first, widest = [], 0, 0
    for i, (seq, start) in enumerate(zip(ids, starts, strict=True)):
        span = max(widest, len(seq) - start + 1)
        rows = i - first + 1
        if i > first and (rows > max_rows or rows * span * vocab > LOGITS_BUDGET):
            out.append(slice(first, i))
            first, span = i, len(seq) - start + 1
        widest = span
    if first < len(ids):
        out.append(slice(first, len(ids)))
    return out


@dataclasses.dataclass(frozen=True)
class _Row:
    """One completion to draw: its prompt, its generator's seed, its max_tokens."""

    prompt: list[int]
    seed: int | None
    max_tokens: int


def processed_logits(logits_BV: Tensor, *, settings: SamplingSettings) -> Tensor:
    """The logits the sampler draws from, in vLLM's order: divided by the temperature,
    then masked to -inf outside the top-k, then outside the top-p nucleus. Greedy
    decoding takes the raw logits (vLLM skips the processing for greedy requests)."""
    if settings.is_greedy:
        return logits_BV
    scaled_BV = logits_BV / settings.temperature
    return _top_k_top_p(scaled_BV, top_k=settings.top_k, top_p=settings.top_p)


def sample_tokens(
    logits_BV: Tensor, *, settings: SamplingSettings, generators: list[torch.Generator | None]
) -> Tensor:
    """One token per row, as vLLM's sampler does it: temperature, then top-k, then top-p,
    then an exponential race (argmax of p / q, q ~ Exp(1)) with each row's generator."""
    processed_BV = processed_logits(logits_BV, settings=settings)
    return _draw(processed_BV, greedy=settings.is_greedy, generators=generators)


def _draw(
    processed_BV: Tensor, *, greedy: bool, generators: Sequence[torch.Generator | None]
) -> Tensor:
    if greedy:
        return processed_BV.argmax(-1)
    probs_BV = processed_BV.softmax(-1)
    q_BV = torch.stack(
        [torch.empty_like(probs_BV[0]).exponential_(generator=g) for g in generators]
    )
    return (probs_BV / q_BV).argmax(-1)


def _top_k_top_p(logits_BV: Tensor, *, top_k: int, top_p: float) -> Tensor:
    """Mask to -inf outside the top-k, then outside the top-p nucleus (vLLM's semantics:
    drop the lowest tokens whose cumulative probability stays <= 1 - top_p, keep >= 1)."""
    V = logits_BV.shape[-1]
    use_k = 0 < top_k < V
    if not use_k and top_p >= 1.0:
        return logits_BV
    sorted_BV, index_BV = logits_BV.sort(dim=-1, descending=False)
    if use_k:
        kth_B1 = sorted_BV[:, V - top_k : V - top_k + 1]
        sorted_BV = sorted_BV.masked_fill(sorted_BV < kth_B1, float("-inf"))
    if top_p < 1.0:
        cumulative_BV = sorted_BV.softmax(-1).cumsum(-1)
        drop_BV = cumulative_BV <= 1 - top_p
        drop_BV[:, -1] = False
        sorted_BV = sorted_BV.masked_fill(drop_BV, float("-inf"))
    return torch.empty_like(logits_BV).scatter_(-1, index_BV, sorted_BV)


def _left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    if any(len(p) == 0 for p in prompts):
        raise ValueError("empty prompt: every prompt needs at least one token")
    T = max(len(p) for p in prompts)
    input_ids_BT = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    attention_BT = torch.zeros((len(prompts), T), dtype=torch.long)
    for b, prompt in enumerate(prompts):
        input_ids_BT[b, T - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention_BT[b, T - len(prompt) :] = 1
    return input_ids_BT.to(device), attention_BT.to(device)


def _generator(seed: int | None, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    if seed is None:
        g.seed()
    else:
        g.manual_seed(seed)
    return g


def _eos_token_ids(model, tokenizer) -> set[int]:
    """The tokenizer's EOS plus the generation config's (vLLM stops on both too)."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    generation = model.generation_config  # None for a model that does not generate
    config_eos = generation.eos_token_id if generation is not None else None
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos is not None:
        ids.update(int(i) for i in config_eos)
    if not ids:
        raise ValueError("the tokenizer and generation config name no end-of-sequence token")
    return ids
