"""The typed run configuration, ``RunConfig``: a YAML recipe plus dotted overrides
validates into it before any model loads. Its sections live in modules by concern (field
docstrings are the reference documentation), cross-field checks in ``config/checks.py``.
"""

from __future__ import annotations

from pydantic import model_validator

from grouprl.algo.correction_choice import auto_correction
from grouprl.config.algo_section import AlgoConfig
from grouprl.config.ckpt import CheckpointConfig
from grouprl.config.env import EnvConfig
from grouprl.config.model_data import DataConfig, ModelConfig
from grouprl.config.observe import MetricsConfig
from grouprl.config.reward import RewardConfig
from grouprl.config.rollout import RolloutConfig
from grouprl.config.section import Section, name_sections
from grouprl.config.teacher import TeacherConfig
from grouprl.config.train import ClusterConfig, CriticConfig, TrainConfig, TrainerConfig


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
    teacher: TeacherConfig | None = None
    """The frozen model whose logprobs of the sampled tokens distillation learns from
    (`algo.teacher_coef`, `algo.name=distill`); null: none."""
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
    def _fill_algo(self) -> RunConfig:
        """``algo.norm_tokens: null`` and ``algo.correction: auto`` as the run resolves them
        (the saved config shows which)."""
        if self.algo.norm_tokens is None:
            self.algo.norm_tokens = self.rollout.max_tokens
        if self.algo.correction == "auto":
            stale = self.rollout.max_staleness > 0
            self.algo.correction = auto_correction(tis_cap=self.algo.tis_cap, stale=stale)
        return self

    def model_post_init(self, context: object) -> None:
        name_sections(self, path="")  # errors of a value set from Python name the whole key
