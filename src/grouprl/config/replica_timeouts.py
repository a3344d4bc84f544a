"""How long a rollout replica's call may take before the step fails, naming the replica
(``rollout.timeout_s``). No torch.

    rollout.timeout_s=T      every call (generation, weight push, sleep, wake, close): T
    rollout.timeout_s=null   from the call's work, at low rates:
      generation   max(120 s, 3 x (prefill / P + generated / D))
                   prefill = the call's prompt tokens x rollout.n, generated = its
                   sequences x max_tokens; P, D = 500, 20 tokens/s on CPU and 10,000,
                   500 tokens/s on GPU, all of the call's sequences together
      weight push  max(120 s, 3 x the weights' bytes / 100 MB/s)
      other calls  600 s (sleep and wake move the weights between GPU and host memory)

    rollout.start_timeout_s   a replica actor's start (Ray placing it, then its engine
                              loading the model); null: 600 s on CPU, 300 s on GPU

A replica that is alive but stuck (a hung GPU, a stopped process) answers nothing, so the
bound is the only way its call ends: low enough that a hang costs minutes on GPU, not the
hour of a flat default, and 3x the work at low rates, so that a slow call is not taken for
a hung one. The rates do not depend on the model's size: a run whose calls are slower (a
large model on CPU) sets ``rollout.timeout_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grouprl.config.schema import RunConfig

FLOOR_S = 120.0
SAFETY = 3.0
PREFILL_TOKENS_PER_S = {"CPU": 500.0, "GPU": 10_000.0}  # all of a call's sequences together
DECODE_TOKENS_PER_S = {"CPU": 20.0, "GPU": 500.0}
PUSH_BYTES_PER_S = 100e6
OTHER_CALL_S = 600.0
# a start on CPU loads the engine on cores the training ranks share (issue 37: a replica
# on a loaded CPU machine passed the former 120 s); on GPU a wait for busy GPUs is a hang
START_S = {"CPU": 600.0, "GPU": 300.0}


@dataclass(frozen=True)
class Bound:
    """A call's limit in seconds and how it follows from the config, for messages."""

    seconds: float
    rule: str


def generation_bound(
    timeout_s: float | None, *, prefill_tokens: int, sequences: int, new_tokens: int, on_gpu: bool
) -> Bound:
    """The limit of one generation call of ``sequences`` samples: ``prefill_tokens`` (each
    sample's prompt, summed) and ``new_tokens``, the most they may generate together."""
    if timeout_s is not None:
        return _explicit(timeout_s)
    device = "GPU" if on_gpu else "CPU"
    prefill_rate, decode_rate = PREFILL_TOKENS_PER_S[device], DECODE_TOKENS_PER_S[device]
    work = prefill_tokens / prefill_rate + new_tokens / decode_rate
    return Bound(
        max(FLOOR_S, SAFETY * work),
        f"rollout.timeout_s=null: {sequences:,} sequences, {prefill_tokens:,} prompt and "
        f"{new_tokens:,} new tokens at {prefill_rate:,g} and {decode_rate:,g} tokens/s on "
        f"{device}, x{SAFETY:g}, at least "
        f"{FLOOR_S:g} s; set rollout.timeout_s to allow longer",
    )


def step_generation_bound(cfg: RunConfig, *, on_gpu: bool) -> Bound:
    """A replica's generation call in a single-turn step, at its share of the prompts
    (``data.batch_size`` over the replicas) with prompts of ``data.max_prompt_tokens``:
    what ``grouprl plan`` shows."""
    prompts = math.ceil(cfg.data.batch_size / cfg.rollout_replicas)
    sequences = prompts * cfg.rollout.n
    return generation_bound(
        cfg.rollout.timeout_s,
        prefill_tokens=sequences * cfg.data.max_prompt_tokens,
        sequences=sequences,
        new_tokens=sequences * cfg.rollout.max_tokens,
        on_gpu=on_gpu,
    )


def push_bound(timeout_s: float | None, *, nbytes: int) -> Bound:
    """The limit of one weight push of ``nbytes``."""
    if timeout_s is not None:
        return _explicit(timeout_s)
    seconds = max(FLOOR_S, SAFETY * nbytes / PUSH_BYTES_PER_S)
    return Bound(
        seconds,
        f"rollout.timeout_s=null: {nbytes / 1e6:,.0f} MB of weights at "
        f"{PUSH_BYTES_PER_S / 1e6:g} MB/s, x{SAFETY:g}, at least {FLOOR_S:g} s; set "
        "rollout.timeout_s to allow longer",
    )


def other_call_bound(timeout_s: float | None) -> Bound:
    """The limit of a sleep, a wake-up or a close."""
    if timeout_s is not None:
        return _explicit(timeout_s)
    return Bound(OTHER_CALL_S, "rollout.timeout_s=null: a sleep, wake-up or close")


def start_bound(timeout_s: float | None, *, on_gpu: bool, gpus_asked: int) -> tuple[str, Bound]:
    """What a replica actor's start waits for on this machine and its limit
    (``rollout.start_timeout_s``), for ``ActorEngine.get``'s message. ``gpus_asked``: the
    GPUs the actor asks Ray for (``rollout.gpus`` set; 0 on CPU or colocated, where the
    start is the engine loading only)."""
    device = "GPU" if on_gpu else "CPU"
    if gpus_asked:
        what = (
            f"its start (waiting for a node with the {gpus_asked} free GPU(s) it asks for, "
            "rollout.tensor_parallel_size of the rollout.gpus, then loading the engine)"
        )
        fix = "free those GPUs, lower rollout.gpus, or raise rollout.start_timeout_s"
    else:
        where = "on GPU" if on_gpu else "on this machine's CPUs, shared with the training ranks"
        what = f"its start (loading the engine and the model {where})"
        fix = "raise rollout.start_timeout_s on a busy machine"
    if timeout_s is not None:
        return what, Bound(timeout_s, f"rollout.start_timeout_s={timeout_s:g}; {fix}")
    seconds = START_S[device]
    return what, Bound(
        seconds,
        f"rollout.start_timeout_s=null: {seconds:g} s on {device}; {fix}, e.g. "
        f"rollout.start_timeout_s={2 * seconds:g}",
    )


def _explicit(timeout_s: float) -> Bound:
    return Bound(timeout_s, f"rollout.timeout_s={timeout_s:g}; raise it if the replica is slow")
