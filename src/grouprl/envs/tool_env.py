"""A tool-using environment: the model calls tools until it answers; and ``search_qa``,
the built-in search agent made from it.

Each model turn is read in this order:

1. an ``<answer>...</answer>`` tag ends the episode (``answered``); the outcome
   reward functions score that turn;
2. otherwise its tool calls (``env.tool_format``) run, each within ``timeout_s``, and the
   results (or error texts) come back as tool messages: a malformed call, an
   unknown tool, bad arguments, a raising or hanging tool are observations and
   metrics, never a crash;
3. a turn with neither ends the episode (``parse_error``).

The turn reward (``turn_reward``) scores the turn's tool results:
``retrieved_answer`` is 1 when a result without error contains one of the row's
answer aliases (after QA normalisation), the signal MT-GRPO credits.

``SearchQA`` (``env.name=search_qa``) takes its settings from ``env.args`` as your own
class does (``SearchQA(**env.args, ctx=EnvContext)``, checked against its ``__init__``):
``corpus``, ``k``, ``max_chars``, ``timeout_s`` and ``turn_reward``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt

from grouprl.data.prompts import PLACEHOLDER
from grouprl.envs.base import EnvContext, Step, opening
from grouprl.envs.search import DEFAULT_MAX_CHARS
from grouprl.rewards.qa import answer_aliases, extract_answer, normalize_answer
from grouprl.tools.calls import parse_tool_calls
from grouprl.tools.runner import ToolResult, ToolRunner, tool_message
from grouprl.tools.spec import ToolSet

SYSTEM_PROMPTS = {
    # the tool call format is explained in words: small models need no template support
    "xml": "Answer the question. To look something up, write <search>query</search> and "
    "wait for the result. Give the final answer as <answer>text</answer>.",
    # the chat template lists the tools and their call format (Qwen2.5, Hermes)
    "qwen": "Answer the question. Use the tools to look things up. Give the final answer "
    "as <answer>text</answer>.",
}

TurnReward = Literal["retrieved_answer", "none"]


class ToolEnv:
    def __init__(
        self,
        tools: ToolSet,
        *,
        tool_format: str,
        timeout_s: float,
        max_chars: int = DEFAULT_MAX_CHARS,
        turn_reward: TurnReward = "retrieved_answer",
        system_prompt: str,
        prompt_key: str,
        answer_key: str,
        prompt_template: str = PLACEHOLDER,
    ) -> None:
        self.tools, self.tool_format = tools, tool_format
        self.timeout_s, self.turn_reward = timeout_s, turn_reward
        self.runner = ToolRunner(tools, max_chars=max_chars)
        self.system_prompt = system_prompt
        self.prompt_key, self.answer_key = prompt_key, answer_key
        self.prompt_template = prompt_template

    def episode(self, row: dict[str, Any]) -> ToolEpisode:
        return ToolEpisode(self, row)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """Passed to the chat template: the tool schemas when the model calls tools in the
        template's own format (``qwen``); nothing for ``xml``, whose format the system
        prompt explains."""
        return {"tools": self.tools.schemas()} if self.tool_format == "qwen" else {}


class ToolEpisode:
    def __init__(self, env: ToolEnv, row: dict[str, Any]) -> None:
        self.env, self.row = env, row

    def start(self) -> list[dict[str, Any]]:
        """The system prompt and the question (or the row's own chat messages, with the
        environment's system prompt first unless they have one)."""
        return opening(self.env, self.row)

    def step(self, model_text: str) -> Step:
        env = self.env
        if extract_answer(model_text) is not None:
            return Step(messages=[], done=True, stop_reason="answered")
        calls = parse_tool_calls(model_text, tools=env.tools, fmt=env.tool_format)
        if not calls:
            return Step(messages=[], done=True, stop_reason="parse_error")
        results = [env.runner.run(c, timeout_s=env.timeout_s) for c in calls]
        errors = sum(r.error is not None for r in results)
        return Step(
            messages=[tool_message(r) for r in results],
            reward=self._turn_reward(results),
            info={"tool_calls": len(results), "tool_errors": errors},
        )

    def _turn_reward(self, results: list[ToolResult]) -> float:
        if self.env.turn_reward == "none":
            return 0.0
        aliases = [normalize_answer(a) for a in answer_aliases(self.row[self.env.answer_key])]
        found = [normalize_answer(r.content) for r in results if r.error is None]
        return float(any(alias and alias in text for alias in aliases for text in found))


class SearchQA(ToolEnv):
    """``env.name=search_qa``: the search agent over ``corpus``, built from ``env.args``
    like your own class. Its episodes open with ``data.system_prompt`` (or its own, which
    explains the tool format) and the question through ``data.prompt_template`` (or the
    row's own chat messages)."""

    def __init__(
        self,
        *,
        corpus: str = "builtin:fictional",
        k: Annotated[int, Ge(1)] = 1,
        max_chars: Annotated[int, Ge(16)] = DEFAULT_MAX_CHARS,
        timeout_s: Annotated[float, Gt(0)] = 10.0,
        turn_reward: TurnReward = "retrieved_answer",
        ctx: EnvContext,
    ) -> None:
        """``corpus``: ``builtin:fictional`` (indexed once into ``ctx.cache_dir``) or a
        directory made by ``grouprl index build``; ``k``: passages per search;
        ``max_chars``: characters per passage and per tool result; ``timeout_s``: each
        tool call's; ``turn_reward``: ``retrieved_answer`` or ``none``."""
        from grouprl.envs.search import SearchIndex, make_search_tool, resolve_corpus

        index = SearchIndex.load(resolve_corpus(corpus, cache_dir=ctx.cache_dir))
        super().__init__(
            ToolSet([make_search_tool(index, k=k, max_chars=max_chars)]),
            tool_format=ctx.tool_format,
            timeout_s=timeout_s,
            max_chars=max_chars,
            turn_reward=turn_reward,
            system_prompt=ctx.system_prompt or SYSTEM_PROMPTS[ctx.tool_format],
            prompt_key=ctx.prompt_key,
            answer_key=ctx.answer_key,
            prompt_template=ctx.prompt_template,
        )
