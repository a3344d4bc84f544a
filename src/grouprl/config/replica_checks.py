"""Where the rollout engine's replicas go, and the checks that they fit. No torch.

R replicas (``RunConfig.rollout_replicas``), W training ranks, tp =
``rollout.tensor_parallel_size``; ``engines/replicas.py`` places them the same way::

    colocated  cluster.gpus_per_node > 0, rollout.gpus = 0: replica k shares the GPUs of
               the tp training ranks from rank k x W // R (one node's), and sleeps while
               they train
    dedicated  rollout.gpus > 0: replica k on node k x cluster.nodes // R, on tp of the
               rollout.gpus GPUs that node keeps for generation
    CPU        cluster.gpus_per_node = 0: Ray actors on node k x cluster.nodes // R, or one
               engine in the driver process
"""

from __future__ import annotations

from collections import Counter

from grouprl.config.errors import choices, divisors
from grouprl.config.schema import RunConfig


def colocated(cfg: RunConfig) -> bool:
    """Whether the replicas share the training ranks' GPUs (and sleep while they train)."""
    r = cfg.rollout
    return cfg.cluster.gpus_per_node > 0 and r.gpus == 0 and r.engine != "server"


def replica_nodes(cfg: RunConfig) -> list[int]:
    """The node (0 .. cluster.nodes - 1) of each replica."""
    replicas, nodes = cfg.rollout_replicas, cfg.cluster.nodes
    if colocated(cfg):
        world, per_node = cfg.world_size, cfg.ranks_per_node
        return [(k * world // replicas) // per_node for k in range(replicas)]
    return [k * nodes // replicas for k in range(replicas)]


def replicas_per_node(cfg: RunConfig) -> int:
    """The most replicas any node runs."""
    return max(Counter(replica_nodes(cfg)).values())


def replicas_text(cfg: RunConfig) -> str:
    """``rollout.replicas=3``, or ``rollout.replicas=null (16)`` with the resolved count."""
    r = cfg.rollout
    if r.replicas is not None:
        return f"rollout.replicas={r.replicas}"
    return f"rollout.replicas=null ({cfg.rollout_replicas})"


def replica_problems(cfg: RunConfig) -> list[str]:
    """A server without its URL or with replicas, a driver engine beside several ranks, and
    replicas that do not fit the GPUs they are placed on."""
    r = cfg.rollout
    if r.engine == "server":
        return _server(cfg)
    problems = _driver(cfg)
    if cfg.cluster.gpus_per_node and r.gpus == 0:
        problems += _colocated(cfg)
    elif cfg.cluster.gpus_per_node and r.gpus:
        problems += _dedicated(cfg)
    return problems


def _server(cfg: RunConfig) -> list[str]:
    problems, replicas = [], cfg.rollout.replicas
    if not cfg.rollout.server_url:
        problems.append(
            "rollout.engine=server needs rollout.server_url (an OpenAI-compatible vLLM "
            "server, e.g. http://gen-node:8000, started with VLLM_SERVER_DEV_MODE=1 and "
            "--logprobs-mode processed_logprobs), or use rollout.engine=vllm."
        )
    if replicas is not None and replicas != 1:
        problems.append(
            f"rollout.replicas={replicas} with rollout.engine=server: every generation goes "
            "to the one server at rollout.server_url, so this engine allows 1 replica. Set "
            "rollout.replicas=1 (or null), or rollout.engine=vllm to run "
            f"{replicas} engines of grouprl's own."
        )
    return problems


def _driver(cfg: RunConfig) -> list[str]:
    r, world, replicas = cfg.rollout, cfg.world_size, cfg.rollout_replicas
    if r.placement != "driver" or (world == 1 and replicas == 1):
        return []
    has = []
    if world > 1:
        has.append(
            f"{world} training ranks (cluster.nodes={cfg.cluster.nodes} x "
            f"{cfg.ranks_per_node} per node)"
        )
    if replicas > 1:
        has.append(f"{replicas} replicas ({replicas_text(cfg)})")
    one = " or rollout.replicas=1" if world == 1 else ""
    return [
        "rollout.placement=driver runs one engine in the driver process, which allows 1 "
        f"training rank and 1 replica, but the run has {' and '.join(has)}. Set "
        f"rollout.placement=auto or actor (the engines as Ray actors beside the ranks){one}."
    ]


def _colocated(cfg: RunConfig) -> list[str]:
    tp, per_node, world = cfg.rollout.tensor_parallel_size, cfg.ranks_per_node, cfg.world_size
    replicas = cfg.rollout_replicas
    if per_node % tp:
        return [
            f"rollout.tensor_parallel_size={tp} must divide the {per_node} training ranks per "
            "node: a colocated replica (rollout.gpus=0) shares the GPUs of "
            "tensor_parallel_size ranks on one node. Choose rollout.tensor_parallel_size in "
            f"{choices(divisors(per_node), more=False)}, or give the engines GPUs of their own "
            f"(rollout.gpus={tp})."
        ]
    if replicas * tp > world:
        most = world // tp
        return [
            f"{replicas_text(cfg)} x rollout.tensor_parallel_size={tp} = {replicas * tp} "
            "GPUs, but colocated replicas (rollout.gpus=0) share the training ranks' GPUs "
            f"and there are {world} (cluster.nodes={cfg.cluster.nodes} x {per_node} per "
            f"node). Set rollout.replicas to {most} or fewer (null: {most}, one per {tp} "
            "GPUs), or lower rollout.tensor_parallel_size."
        ]
    split = _split_by_node(replicas, world, tp, per_node)
    if split is None:
        return []
    fits = [n for n in range(1, world // tp + 1) if _split_by_node(n, world, tp, per_node) is None]
    first = split * world // replicas
    return [
        f"{replicas_text(cfg)} with rollout.tensor_parallel_size={tp} gives replica {split} "
        f"the GPUs of training ranks {first}-{first + tp - 1} (replica k starts at rank k x "
        f"{world} // {replicas}), which are on two nodes of {per_node} ranks each; a "
        f"replica's GPUs must be on one node. Choose rollout.replicas in "
        f"{choices(fits, more=False)}."
    ]


def _split_by_node(replicas: int, world: int, tp: int, per_node: int) -> int | None:
    """The first replica whose tp ranks are on two nodes, or None."""
    for k in range(replicas):
        first = k * world // replicas
        if first // per_node != (first + tp - 1) // per_node:
            return k
    return None


def _dedicated(cfg: RunConfig) -> list[str]:
    r, c = cfg.rollout, cfg.cluster
    kept, tp = r.gpus, r.tensor_parallel_size
    if kept >= c.gpus_per_node:
        return [
            f"rollout.gpus={kept} keeps {kept} of a node's {c.gpus_per_node} GPUs "
            "(cluster.gpus_per_node) for generation, leaving none for the training ranks. Set "
            f"rollout.gpus to {c.gpus_per_node - 1} or fewer, or rollout.gpus=0 (the engines "
            "share the training GPUs and sleep while they train)."
        ]
    if tp > kept:
        return [
            f"rollout.tensor_parallel_size={tp} spreads a replica over {tp} GPUs of one "
            f"node, more than the rollout.gpus={kept} each node keeps for generation. Raise "
            f"rollout.gpus to {tp} (it must stay below cluster.gpus_per_node="
            f"{c.gpus_per_node}), or choose rollout.tensor_parallel_size in "
            f"{choices(divisors(kept), more=False)}."
        ]
    per_node, replicas = replicas_per_node(cfg), cfg.rollout_replicas
    if per_node * tp <= kept:
        return []
    most = c.nodes * (kept // tp)
    return [
        f"{replicas_text(cfg)} puts {per_node} replicas on a node (replica k on node k x "
        f"cluster.nodes={c.nodes} // {replicas}), each on rollout.tensor_parallel_size={tp} "
        f"GPU(s) of its own: {per_node * tp} GPUs, more than the rollout.gpus={kept} per "
        f"node. Set rollout.replicas to {most} or fewer (null: {most}), or raise rollout.gpus."
    ]
