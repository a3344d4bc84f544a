"""Every sampling seed of a run, derived from ``train.seed`` in one place.

::

    run seed (train.seed)
        │ step_seed(seed, step, round_)   ((seed * 1_000_003 + step) * 100_000) % (2**31 - 1)
        │                                 + round_ << ROUND_SHIFT (dynamic sampling's rounds)
        ▼
    engine call k of an episode         call_seed: + k * CALL_STRIDE (7919)
        ▼
    continuation segment s of the call  segment_seed: + s << SEGMENT_SHIFT (engines/segments)
        ▼
    prompt i's request (n samples)      request_seed: + i * n (what vLLM is sent)
        ▼
    sample j                            + j (vLLM's child seeds; request_seed's sample)

The low part (below 2**32: the step's base, calls, prompts and samples) is what every run
drew before rounds and segments moved up, so round 0 and segment 0 draw as they always did.
It is collision-free within these bounds: samples per call (prompts x n) < CALL_STRIDE,
calls x CALL_STRIDE + samples < STEP_STRIDE (so 13 calls reach the next step's base), and
the steps of a run fewer than (2**31 - 1) // STEP_STRIDE = 21_474 apart. Rounds >= 1
and segments >= 1 add bit fields above it (segment < 2**16, round < 2**15), so they meet
neither the low part nor each other, and a seed stays below 2**63 (torch's generators and
vLLM's ``SamplingParams.seed``, including its OpenAI server's, take signed 64-bit seeds).
"""

from __future__ import annotations

RUN_STRIDE = 1_000_003
STEP_STRIDE = 100_000
CALL_STRIDE = 7919
MODULUS = 2**31 - 1
SEGMENT_SHIFT = 32
ROUND_SHIFT = 48


def step_seed(seed: int, step: int, round_: int = 0) -> int:
    """The base seed of generation round ``round_`` of training step ``step``."""
    return ((seed * RUN_STRIDE + step) * STEP_STRIDE) % MODULUS + (round_ << ROUND_SHIFT)


def call_seed(seed: int | None, call: int) -> int | None:
    """The seed of an episode's engine call ``call`` (0 first)."""
    return None if seed is None else seed + call * CALL_STRIDE


def segment_seed(seed: int | None, segment: int) -> int | None:
    """The seed of continuation segment ``segment`` (1, 2, ...) of a call seeded ``seed``."""
    return None if seed is None else seed + (segment << SEGMENT_SHIFT)


def request_seed(seed: int | None, prompt: int, group_size: int, sample: int = 0) -> int | None:
    """The seed of sample ``sample`` of prompt ``prompt`` in a call seeded ``seed`` (vLLM
    seeds child j of a request seeded s with s + j, so a request is sent with sample 0's)."""
    return None if seed is None else seed + prompt * group_size + sample
