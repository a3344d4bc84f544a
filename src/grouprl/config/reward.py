"""The `reward` section: the reward functions and how their calls are contained. Imports no
torch."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from grouprl.config.containment import Contained, OnError, SandboxConfig
from grouprl.config.section import Section


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
    args: dict[str, Any] = Field(default_factory=dict)
    """The function's own settings, as verl's `reward_kwargs`: keyword arguments added to
    every call (`fn(..., **args)`), or, for a registered settings object such as
    `code_tests`, its fields replaced (`{partial_credit: true, wall_s: 4}`). Checked
    against the function before any model loads. The same function may be listed again
    with other args; that entry's scores are named `<name>_2` (docs/rewards.md)."""


REWARD_SANDBOX = SandboxConfig(workers=2, memory_mb=4096, timeout_s=10.0)


class RewardConfig(Contained):
    SECTION: ClassVar[str] = "reward"
    SANDBOX: ClassVar[SandboxConfig] = REWARD_SANDBOX
    IN_PROCESS: ClassVar[bool] = False

    functions: list[RewardFunction] = [RewardFunction(name="math_answer")]  # noqa: RUF012
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
    """When the last this-many calls of a function all failed (any errors, mixed too:
    raised, timed out, crashed), the run stops, whenever in the run it happens, naming the
    function, its last error and the fix, rather than train on a broken grader or a judge
    that went down. One call that returns restarts the count. null: never."""
    sandbox: SandboxConfig = REWARD_SANDBOX
    """The worker processes that run the reward functions: a call past `timeout_s` is
    killed and fails (docs/rewards.md)."""
    network: bool = False
    """Whether reward functions may use the network (an LLM judge's API: true). false:
    each reward worker runs in its own user and network namespace (no interface but a
    down loopback) where the OS allows it; where it does not, the run says so at its start
    and `grouprl plan` shows it."""
