"""The `train`, `critic`, `trainer` and `cluster` sections: the optimizer, the value model,
the loop's schedule, and where the training ranks run. Imports no torch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grouprl.config.section import Section


class CriticConfig(Section):
    path: str
    """The value model's starting point: a causal LM (the same architecture as the policy,
    e.g. `builtin:tiny-arith`; a scalar head is added) or a critic saved by grouprl."""
    lr: float = Field(default=1e-5, gt=0)
    """The critic's own AdamW learning rate (constant)."""
    weight_decay: float = Field(default=0.0, ge=0)
    """The critic's AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """The critic's AdamW betas."""
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Clip the critic's gradient norm; null disables clipping."""
    value_clip: float | None = Field(default=0.2, gt=0)
    """PPO's value clipping: a new value may move at most this far from the old one
    before its loss stops counting; null: plain squared error."""
    warmup_steps: int = Field(default=0, ge=0)
    """Training steps at the start where only the critic learns (the policy waits for
    useful values)."""


class LoraConfig(Section):
    rank: int = Field(default=0, ge=0)
    """LoRA rank r on the policy (through PEFT); 0: train every weight. Only the adapters
    train; the KL reference is the same model with the adapters off, and the engine gets
    merged weights."""
    alpha: float = Field(default=32.0, gt=0)
    """Adapter scale alpha (the update is alpha / r x B A)."""
    dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout on the adapters' input; keep 0 for RL (it makes trainer and engine
    logprobs disagree)."""
    target_modules: str | list[str] = "all-linear"
    """Modules that get adapters: `all-linear` (every linear layer but the LM head) or
    names such as [q_proj, v_proj]."""


class TrainConfig(Section):
    lr: float = Field(default=1e-6, gt=0)
    """The policy's AdamW learning rate (the peak, after warmup)."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW weight decay; biases and norm weights are exempt (`workers/optim.py`)."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """Shape after warmup; cosine decays to `min_lr_ratio` x lr at the last step."""
    warmup_steps: int = Field(default=0, ge=0)
    """Training steps (one per batch of prompts, as verl's `lr_warmup_steps`) over which
    the learning rate rises linearly to `lr`: all the optimizer steps of one training step
    (its mini-batches, `algo.num_iterations`) share its rate. TRL's `warmup_steps` counts
    optimizer steps (`workers/optim.py`)."""
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    """`cosine`: the last step's learning rate as a fraction of `lr`."""
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Clip the global gradient norm; null disables clipping."""
    mini_batch_size: int | None = Field(default=None, ge=1)
    """Samples per optimizer step; null means all of a step's samples in one update."""
    micro_batch_size: int = Field(default=8, ge=1)
    """Samples per forward/backward pass on each training rank (gradient accumulation
    fills the rank's share of a mini-batch: mini_batch_size / world size samples)."""
    micro_batch_tokens: int | None = Field(default=None, ge=1)
    """Dynamic batch size: as many consecutive samples per pass as fit this many tokens
    (real tokens with `packing`, else rows x the longest row); replaces
    `micro_batch_size` for splitting. The update is the same either way."""
    packing: bool = False
    """Padding-free passes: a micro-batch's samples run end to end in one row, attention
    kept within each sample; no compute is spent on padding."""
    steps: int | None = Field(default=None, ge=1)
    """Training steps (batches). Exactly one of `steps` and `epochs` is set."""
    epochs: float | None = Field(default=None, gt=0)
    """Passes over the training prompts (converted to steps)."""
    seed: int = 0
    """Seeds the prompt order, the rollouts' sampling and torch, numpy and random."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where training runs: `auto` is cuda when torch sees a GPU, else cpu."""
    activation_checkpointing: bool = False
    """Keep only each decoder layer's input for the backward pass and recompute the rest:
    far less activation memory for about a third more compute."""
    logprob_chunk_tokens: int = Field(default=1024, ge=1)
    """Tokens per chunk when turning hidden states into logprobs (bounds vocab-sized memory)."""
    num_threads: int | None = Field(default=None, ge=1)
    """CPU threads for torch; null keeps torch's default."""
    lora: LoraConfig = LoraConfig()
    """LoRA adapters on the policy (`rank: 0`, the default: full fine-tuning)."""


class TrainerConfig(Section):
    run_dir: str = "runs/{name}"
    """Run directory; `{name}` is the recipe name."""
    resume: str = "never"
    """`never`; `auto` (the newest complete checkpoint across the tiers: memory, then disk,
    then S3); or one checkpoint: a directory or `s3://bucket/prefix/NAMESPACE/step_N`."""
    eval_every: int | None = Field(default=None, ge=1)
    """Validate every N steps; null validates only before and after training."""
    eval_before_train: bool = True
    """Validate before the first step (the baseline of the held-out accuracy's change)."""
    stop_after: int | None = Field(default=None, ge=1)
    """Stop (with a checkpoint) after this many steps in this session, as a preemption
    would; a later `trainer.resume=auto` run continues to `train.steps`."""
    log_samples: int = Field(default=4, ge=0)
    """Completions per step written to samples.jsonl."""
    max_restarts: int = Field(default=0, ge=0)
    """When a training rank or node dies, start the ranks again and resume from the newest
    checkpoint, up to this many times; 0: fail the run, naming the rank."""
    max_idle_steps: int | None = Field(default=3, ge=1)
    """When this many steps in a row trained no sample (every sample failed, or its group
    was left too small), the run stops, naming the steps, why their samples failed and the
    fix. Counted across resumes. null: never."""


class ClusterConfig(Section):
    """Where the training workers run. One worker (the default) trains in this process,
    without Ray; more start one Ray actor per rank, which join a torch.distributed group
    (gloo on CPU, nccl on GPU) and shard the policy, reference and critic with FSDP2."""

    nodes: int = Field(default=1, ge=1)
    """Nodes of the Ray cluster the training workers span."""
    gpus_per_node: int = Field(default=0, ge=0)
    """GPUs per node for training workers (one worker per GPU); 0: CPU workers."""
    workers_per_node: int | None = Field(default=None, ge=1)
    """Training ranks per node; null: `gpus_per_node` on GPU nodes, 1 on CPU nodes."""
    cpus_per_worker: float = Field(default=1.0, gt=0)
    """CPUs Ray reserves for each worker (and torch threads it uses on CPU)."""
    address: str | None = None
    """Ray cluster to join (`HOST:PORT`, `ray://HOST:10001` or `auto`); null: the cluster
    in RAY_ADDRESS (set inside `grouprl submit` jobs), else a Ray instance started here."""
    collective_timeout_s: float = Field(default=600.0, gt=0)
    """A collective that waits longer (a rank died or hangs) fails the run, naming it."""
    gpu: str | None = None
    """The GPU `grouprl plan` (and `train`) checks memory against: a model (H100, H200,
    A100-80GB, A100-40GB, L40S, L4, A10G, B200) or a size (`80GiB`); null: no check."""
    offload: bool = False
    """FSDP2 CPU offload: parameters, gradients and optimizer states live in CPU memory
    between uses (fits bigger models on fewer GPUs, slower steps; needs 2+ ranks)."""
    offload_optimizer: bool = False
    """The optimizer states alone (AdamW's moments, 8 bytes per parameter) live in CPU
    memory and come to the GPU only for each optimizer step: more room for activations
    and for a colocated engine's KV cache, at one transfer each way per step. Nothing to
    do on CPU, or where cluster.offload already keeps them there."""
