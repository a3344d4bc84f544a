"""The async section of ``grouprl plan``: which cores or GPUs generate and which train, the
staleness bound, the correction, and the overlap to expect. No torch.

With G the seconds a step's generation takes and T its training, a synchronous step
(``rollout.max_staleness=0``) is G + T + push; with ``max_staleness`` >= 1 and an engine
that does not share the training devices, the next batches generate while this one
trains, so a step is about max(G, T) + push and the speedup is (G + T + push) /
(max(G, T) + push): at most 2x, reached when G = T. The plan knows neither G nor T, so it
shows the formula (``benchmarks/async.py`` measures both).
"""

from __future__ import annotations

from grouprl.config.errors import show
from grouprl.config.replica_checks import colocated
from grouprl.config.schema import RunConfig
from grouprl.plan.rows import Row

CORRECTIONS = {
    "none": "no importance weight: the loss takes the samples as on-policy",
    "decoupled": "decoupled PPO (AReaL): PPO clip against the trainer's logprobs before "
    "the update (pi_prox), tokens weighted by pi_prox / pi_behaviour (the engine's), those "
    "above the cap masked",
    "tis": "truncated importance sampling per token: min(pi_trainer / pi_engine, cap)",
    "seq_tis": "one truncated weight per sequence: min(product of its token ratios, cap)",
    "token_mask": "IcePop: tokens whose ratio pi_trainer / pi_engine leaves the band masked",
    "seq_mask": "sequences whose ratio leaves the band masked (masked IS)",
    "m2po": "M2PO: tokens with the largest squared log-ratio masked until its mean is under "
    "the threshold",
}
"""One line per ``algo.correction`` (its papers: docs/async.md)."""


def async_rows(cfg: RunConfig) -> list[Row]:
    """Layout, staleness bound, partial rollouts, correction and expected overlap."""
    return [
        _layout_row(cfg),
        _staleness_row(cfg),
        *_partial_rows(cfg),
        _correction_row(cfg),
        _overlap_row(cfg),
    ]


def _layout_row(cfg: RunConfig) -> Row:
    """Which devices generate and which train."""
    r, c = cfg.rollout, cfg.cluster
    ranks = f"{cfg.world_size} training rank{'s' if cfg.world_size != 1 else ''}"
    replicas = f"{cfg.rollout_replicas} engine replica{'s' if cfg.rollout_replicas != 1 else ''}"
    if r.engine == "server":
        return (
            "layout",
            "server",
            f"the vLLM server at {r.server_url} generates on its own GPUs; {ranks} train",
        )
    if c.gpus_per_node and colocated(cfg):
        return (
            "layout",
            "shared GPUs",
            f"the same {c.gpus_per_node} GPUs per node x {c.nodes} train and generate, in "
            f"turn ({replicas}, asleep while the ranks train; rollout.gpus=0)",
        )
    if c.gpus_per_node:
        return (
            "layout",
            f"{r.gpus} gen + {c.gpus_per_node - r.gpus} train",
            f"per node x {c.nodes}: {r.gpus} GPU(s) generate ({replicas} in all, "
            f"rollout.gpus={r.gpus}), {c.gpus_per_node - r.gpus} train ({ranks})",
        )
    threads = f"train.num_threads={cfg.train.num_threads}"
    if not cfg.rollout_in_actors:
        return (
            "layout",
            "one process",
            f"the engine and the training rank share the driver's cores ({threads}); "
            "rollout.placement=actor puts the engine in a Ray actor of its own",
        )
    where = (
        "on the cluster's other node(s) first, then the driver's"
        if cfg.world_size == 1
        else "on the training ranks' nodes"
    )
    return (
        "layout",
        "CPU actors",
        f"{replicas} in Ray actors {where}; {ranks} on CPU ({threads}, "
        f"cluster.cpus_per_worker={show(c.cpus_per_worker)} each): bind each side to cores "
        "of its own (docs/async.md)",
    )


def _staleness_row(cfg: RunConfig) -> Row:
    r = cfg.rollout
    k = r.max_staleness
    if k == 0:
        return (
            "staleness bound",
            "0 (synchronous)",
            "rollout.max_staleness=0: each batch generates with the current weights, then "
            "trains; generation and training never overlap",
        )
    if r.staleness_policy == "wait":
        policy = "a prompt is admitted only while it cannot lag more; generation waits"
    else:
        policy = (
            f"prompts are admitted while the buffer has room ({k + 1} batches); groups found "
            "more stale are dropped (stream/dropped_stale) and their prompts issued again"
        )
    versions = f"{k} weight version{'s' if k != 1 else ''}"
    return (
        "staleness bound",
        f"{k} ({r.staleness_policy})",
        f"rollout.max_staleness={k}: a sample trains at most {versions} after the one that "
        f"generated it; rollout.staleness_policy={r.staleness_policy}: {policy}",
    )


def _partial_rows(cfg: RunConfig) -> list[Row]:
    r = cfg.rollout
    if r.max_staleness == 0:
        return []
    if r.partial_rollout_tokens is None:
        return [
            (
                "partial rollouts",
                "off",
                "rollout.partial_rollout_tokens=null: a weight push waits for the "
                "generations in flight",
            )
        ]
    return [
        (
            "partial rollouts",
            f"{r.partial_rollout_tokens} tokens",
            f"rollout.partial_rollout_tokens={r.partial_rollout_tokens}: a push waits for at "
            "most one segment; a generation continues from its prefix with the new "
            "weights, each token recording its version",
        )
    ]


def _correction_row(cfg: RunConfig) -> Row:
    algo = cfg.algo
    name = algo.correction
    text = f"algo.correction={name}: {CORRECTIONS[name]}"
    default_cap = {"decoupled": 5.0, "tis": 2.0, "seq_tis": 2.0}
    if name in default_cap:
        cap = algo.tis_cap if algo.tis_cap is not None else default_cap[name]
        source = "algo.tis_cap" if algo.tis_cap is not None else "its default; algo.tis_cap"
        text += f"; cap {show(cap)} ({source})"
    elif name in ("token_mask", "seq_mask"):
        low, high = algo.is_band
        text += f"; band [{show(low)}, {show(high)}] (algo.is_band)"
    elif name == "m2po":
        text += f"; threshold {show(algo.m2po_threshold)} (algo.m2po_threshold)"
    text += (
        f"; auto chooses tis with algo.tis_cap, else decoupled when max_staleness > 0, else "
        f"none; a warning past KL {show(algo.mismatch_alarm)} (algo.mismatch_alarm)"
    )
    return ("correction", name, text)


def _overlap_row(cfg: RunConfig) -> Row:
    """The speedup over a synchronous step to expect, as a formula of G and T."""
    r, c = cfg.rollout, cfg.cluster
    formula = "sync step = G + T + push; async step ~= max(G, T) + push"
    if r.max_staleness == 0:
        return (
            "expected overlap",
            "none",
            "rollout.max_staleness=0: a step is G + T + push (G generation, T training); "
            "max_staleness >= 1 makes it ~= max(G, T) + push, up to 2x when G = T",
        )
    # colocated GPUs sleep the engine while the ranks train; one CPU process shares its cores
    if colocated(cfg) or (not c.gpus_per_node and not cfg.rollout_in_actors):
        shared = "GPUs" if c.gpus_per_node else "cores"
        return (
            "expected overlap",
            "little",
            f"generation and training share the same {shared}, so they mostly take turns: "
            f"{formula} holds only with devices of their own (rollout.gpus on GPU, "
            "rollout.placement=actor on CPU)",
        )
    return (
        "expected overlap",
        "(G+T+push) / (max(G,T)+push)",
        f"{formula} (G generation, T training per step; the plan knows neither: "
        "benchmarks/async.py measures them); at most 2x, when G = T",
    )
