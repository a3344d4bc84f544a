"""The `env` section: the environment or your own agent that plays the episodes, and how
their code is contained. Imports no torch."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from grouprl.config.containment import Contained, OnError, SandboxConfig
from grouprl.config.renamed import OLD_NAMES
from grouprl.config.section import Section

ENV_SANDBOX = SandboxConfig(workers=2, memory_mb=8192, timeout_s=30.0)


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
    def _named(cls, data: object) -> object:
        """An agent's settings without its name would be ignored: refused as such."""
        if not isinstance(data, dict) or data.get("name") is not None:
            return data
        keys = [f"env.agent.{key}" for key in data if key != "name"]
        if not keys:
            return data  # pydantic's own: env.agent.name is required
        listed = ", ".join(
            key + (f" (old name {OLD_NAMES[key]})" if key in OLD_NAMES else "") for key in keys
        )
        raise ValueError(
            f"{listed} would be ignored: no agent is named (env.agent.name), so env.name's "
            "environment runs the episodes. Fix: name your agent (env.agent=FILE.py:solve) or "
            f"remove {', '.join(keys)}."
        )


def agent_shorthand(value: object) -> object:
    """``env.agent`` as written: an import path alone means ``{name: it}``."""
    return {"name": value} if isinstance(value, str) else value


class EnvConfig(Contained):
    SECTION: ClassVar[str] = "env"
    SANDBOX: ClassVar[SandboxConfig] = ENV_SANDBOX

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
    failure_brake: int | None = Field(default=16, ge=2)
    """When the last this-many episodes of your environment (`env_error`) or agent
    (`agent_error`) all failed, the run stops, whenever in the run it happens, naming the
    environment or agent, its last error and the fix. One episode that does not fail
    restarts the count; single-turn prompting is never counted. null: never."""

    @classmethod
    def _shorthands(cls, data: dict[str, object]) -> dict[str, object]:
        """``env.agent=FILE.py:solve`` written out first (``env.agent_timeout_s`` goes in it)."""
        if "agent" in data:
            data["agent"] = agent_shorthand(data["agent"])
        return data
