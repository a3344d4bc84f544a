"""The batch arithmetic of a config, from a step's samples down to one rank's passes.

    data.batch_size prompts x rollout.n samples = samples_per_step
    samples_per_step / train.mini_batch_size    = mini-batches per step (whole ones)
    x algo.num_iterations passes                = optimizer steps per training step
    train.mini_batch_size / world size          = a rank's share of each mini-batch
                                                  (``workers/rank.py``: equal contiguous
                                                  blocks, so it must divide evenly)
    share / train.micro_batch_size              = gradient accumulation on each rank

``train.micro_batch_size`` counts samples per forward/backward on one rank, so it is
held to a rank's share, never to the whole mini-batch. Each message names the keys,
their values, the arithmetic and values that work. No torch.
"""

from __future__ import annotations

import math

from grouprl.algo.traits import ESTIMATORS
from grouprl.config.errors import choices, divisors, show
from grouprl.config.schema import RunConfig


def _multiples(step: int, *, start: int = 1, count: int = 4) -> list[int]:
    first = max(step, math.ceil(start / step) * step)
    return [first + i * step for i in range(count)]


def _mini_and_micro(samples: int, *, world: int, micro: int, mini: int) -> str:
    """The fix when no divisor of ``samples`` is a multiple of ``world`` x ``micro``: a
    mini-batch that divides the step with a micro-batch that divides its per-rank share
    (the rule the message states), the largest such mini-batch up to ``mini`` first."""
    sizes = [d for d in divisors(samples) if d % world == 0 and d < samples]
    picks = sorted(sizes, key=lambda d: (d > mini, -d if d <= mini else d))[:2]
    pairs = [
        f"train.mini_batch_size={d} with train.micro_batch_size="
        f"{max(m for m in divisors(d // world) if m <= micro)}"
        for d in picks
    ]
    why = (
        f"(no divisor of {samples} is a multiple of {world} rank{'s' * (world > 1)} x "
        f"train.micro_batch_size={micro})"
    )
    return f"{' or '.join(pairs)} {why}" if pairs else f"train.micro_batch_size=1 {why}"


def batch_problems(cfg: RunConfig) -> list[str]:
    """The first problem of the batch arithmetic, step to rank (see the module's
    docstring), or none."""
    batch, n = cfg.data.batch_size, cfg.rollout.n
    mini, micro = cfg.train.mini_batch_size, cfg.train.micro_batch_size
    samples = batch * n
    smallest = ESTIMATORS[cfg.algo.advantage].min_group_size
    if n < smallest:
        return [
            f"rollout.n={n}: algo.advantage={cfg.algo.advantage} scores each sample against "
            "the other samples of its prompt; a group of one has zero advantage, so nothing "
            f"is learned. Set rollout.n to {smallest} or more (8 is typical), or use an "
            "estimator with a batch or critic baseline (algo.advantage=reinforce_pp, or "
            "algo.name=ppo)."
        ]
    if mini is not None and samples % mini:
        n_step = mini // math.gcd(mini, batch)
        b_step = mini // math.gcd(mini, n)
        world = cfg.world_size
        per_rank = micro if cfg.train.micro_batch_tokens is None else 1
        fits = [d for d in divisors(samples) if d % (world * per_rank) == 0]
        mini_fix = (
            f"train.mini_batch_size in {choices(fits, more=False)}"
            if fits
            else _mini_and_micro(samples, world=world, micro=micro, mini=mini)
        )
        return [
            f"samples per step = data.batch_size={batch} x rollout.n={n} = {samples}, "
            f"which train.mini_batch_size={mini} does not divide ({samples} / {mini} = "
            f"{samples / mini:.3g}); every optimizer step needs a whole mini-batch. Choose "
            f"rollout.n in {choices(_multiples(n_step, start=2), more=True)}, or data.batch_size "
            f"in {choices(_multiples(b_step), more=True)}, or {mini_fix}, or "
            f"train.mini_batch_size=null (one update with all {samples} samples)."
        ]
    return _check_ranks(cfg) or _check_micro_batch(cfg)


def _check_ranks(cfg: RunConfig) -> list[str]:
    """The mini-batch against the training ranks: ``Rank.block`` needs equal blocks."""
    c, world = cfg.cluster, cfg.world_size
    samples = cfg.data.batch_size * cfg.rollout.n
    mini = cfg.train.mini_batch_size or samples
    if not mini % world:
        return []
    fits = [w for w in divisors(mini) if w <= 4 * world]
    return [
        f"{world} training ranks (cluster.nodes={c.nodes} x {cfg.ranks_per_node} per node) "
        f"cannot split a mini-batch of {mini} samples evenly (train.mini_batch_size="
        f"{show(cfg.train.mini_batch_size)}, data.batch_size x rollout.n = {samples}): each "
        f"rank trains on an equal contiguous block of every mini-batch, mini_batch_size / "
        f"{world}, and {mini} / {world} = {mini / world:.3g}. Use a rank count in "
        f"{choices(fits, more=False)}, or a mini-batch that is a multiple of {world} "
        "(train.mini_batch_size, data.batch_size or rollout.n)."
    ]


def _check_micro_batch(cfg: RunConfig) -> list[str]:
    """train.micro_batch_size against a rank's share of a mini-batch: ``Rank.block`` cuts
    each mini-batch into world-size equal contiguous blocks and a rank splits only its own
    block into passes (``MicroBatching.ranges``)."""
    t, world = cfg.train, cfg.world_size
    samples = cfg.data.batch_size * cfg.rollout.n
    mini, micro = t.mini_batch_size or samples, t.micro_batch_size
    if t.micro_batch_tokens is not None or mini % world:
        return []  # a token budget splits instead; an uneven split is _check_ranks'
    share = mini // world
    named = (
        f"train.mini_batch_size={mini}"
        if t.mini_batch_size is not None
        else f"the mini-batch of {samples} samples (train.mini_batch_size=null: a whole step)"
    )
    ranks = f"{world} training rank{'s' if world > 1 else ''}"
    split = f"{named} / world size {world} ({ranks}) = {share} samples"
    if micro > share:
        least = micro * world
        bigger = [m for m in divisors(samples) if m % least == 0]
        raise_fix = f"raise data.batch_size x rollout.n (now {samples}) to a multiple of {least}"
        if bigger and t.mini_batch_size is not None:
            raise_fix = f"raise train.mini_batch_size to one of {choices(bigger, more=False)}"
        elif t.mini_batch_size is not None:
            raise_fix = (
                f"raise train.mini_batch_size to {least} ({micro} per rank x {world} ranks) "
                f"or a multiple of it, and data.batch_size x rollout.n (now {samples}) to a "
                "multiple of that"
            )
        return [
            f"train.micro_batch_size={micro} counts samples per forward/backward on each "
            f"rank, but a rank's share of a mini-batch is only {split}, so no pass could "
            f"hold {micro}. Lower train.micro_batch_size to {share} or fewer (one of "
            f"{choices(divisors(share), more=False)}), or {raise_fix}."
        ]
    if share % micro:
        of = named if world == 1 else f"a rank's share of {named} ({split})"
        return [
            f"train.micro_batch_size={micro} does not divide {of}: {share} / {micro} = "
            f"{share / micro:.3g}; each rank's gradient accumulation needs a whole number of "
            f"micro-batches. Choose train.micro_batch_size in "
            f"{choices(divisors(share), more=False)}."
        ]
    return []
