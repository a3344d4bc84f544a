"""What the gateway records for one episode: each call's exact tokens, and the episode's
Trajectory built from them without re-tokenising anything the model wrote.

::

    call 1  messages M1 ──► chat template ──► prompt ids P ──► engine ──► completion C1
    call 2  M1 + [the reply to C1] + N2: extends call 1, so N2 (tool results, user turns)
            is rendered after C1's own tokens (envs.base.render_observation):
            context = P + C1 + obs(N2) ──► engine ──► C2
    call 3  messages that do not extend call 2 (the agent dropped, edited or summarised
            its history): a new segment, prompt = template(M3) ──► engine ──► C3

A segment is a Trajectory's prompt and turns. The episode's trajectory is its **last**
segment: an agent that rewrites its history trains on the conversation it ended with,
and each rewrite is counted (``rewrites``; metric ``gateway/history_rewrites``). A change of
``tools`` between calls counts as a rewrite too (the prompt renders differently).

The reply matches when the agent sends back the assistant message it got (its content,
and its tool calls by name and arguments; ids, ``refusal`` and other fields are not
compared). A turn cut at the length limit did not end with the end-of-turn token, so its
observation starts with that token (the template closes every assistant message with it).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from grouprl.data.prompts import chat_prompt_ids
from grouprl.envs.base import render_observation
from grouprl.types import Completion, Trajectory, Turn, sequence_ids


@dataclass
class CallRecord:
    """One engine call of an episode: the exact context sent and what came back."""

    prompt_ids: list[int]
    completion: Completion
    segment: int


@dataclass
class Segment:
    prompt_ids: list[int]
    turns: list[Turn]
    weight_version: int
    history: list[tuple] = field(default_factory=list)
    """The conversation so far (normalised messages, the last reply included)."""
    tools_key: str = ""
    text: str = ""
    """``/v1/completions``: the prompt text and completions so far."""

    def sequence_ids(self) -> list[int]:
        return sequence_ids(self.prompt_ids, self.turns)


@dataclass
class Plan:
    """Where the next call's context comes from, applied only once the engine answers."""

    context_ids: list[int]
    extends: bool
    observation_ids: list[int] = field(default_factory=list)
    history: list[tuple] = field(default_factory=list)
    tools_key: str = ""
    text: str = ""


class EpisodeRecord:
    """The calls of one episode (``index``: its position in the rollout) and its segments.
    ``version``: the weight version the engine served when the episode opened, the
    version of an episode that made no call (its agent failed first)."""

    def __init__(
        self, *, key: str, index: int, row: dict[str, Any], eos_id: int | None, version: int = 0
    ) -> None:
        self.key, self.index, self.row, self._eos = key, index, row, eos_id
        self.version = version
        self.segments: list[Segment] = []
        self.calls: list[CallRecord] = []
        self.rewrites = 0
        self.tool_call_errors = 0
        self.reported_reward: float | None = None
        self.refused = 0
        """Calls refused (past ``env.max_turns``, out of context, after the deadline)."""
        self.stop_reason = ""
        """Set when the gateway refused a call (``max_turns``, ``context_overflow``)."""
        self.started = False
        """The agent told the gateway it started (``Gateway.start``)."""
        self.reruns = 0
        """Times the episode started over (its agent was run again after its worker died
        under another agent): this record holds the last run only."""

    def rerun(self) -> EpisodeRecord:
        """An empty record of the same episode, for its agent's next run."""
        fresh = EpisodeRecord(
            key=self.key, index=self.index, row=self.row, eos_id=self._eos, version=self.version
        )
        fresh.started, fresh.reruns = True, self.reruns + 1
        return fresh

    # --- planning a call -------------------------------------------------------------------

    def plan_chat(self, messages: list[dict[str, Any]], *, tools: list | None, tokenizer) -> Plan:
        history = [normalise(m) for m in messages]
        tools_key = json.dumps(tools, sort_keys=True) if tools else ""
        kwargs = {"tools": tools} if tools else {}
        last = self.segments[-1] if self.segments else None
        if (
            last is not None
            and last.history
            and tools_key == last.tools_key
            and len(history) > len(last.history)
            and history[: len(last.history)] == last.history
        ):
            new = [template_message(m) for m in messages[len(last.history) :]]
            observation = self._closing(last) + render_observation(tokenizer, new, **kwargs)
            context = last.sequence_ids() + observation
            return Plan(context, True, observation, history, tools_key)
        prompt = chat_prompt_ids(tokenizer, [template_message(m) for m in messages], **kwargs)
        return Plan(prompt, False, history=history, tools_key=tools_key)

    def plan_text(self, prompt: str | list[int], *, tokenizer) -> Plan:
        """``/v1/completions``: a prompt that continues the last one and its completion
        (as ids, or as text) extends it; the rest is tokenised on its own."""
        last = self.segments[-1] if self.segments else None
        if isinstance(prompt, list):
            if last is not None and not last.text:
                done = last.sequence_ids()
                if len(prompt) > len(done) and prompt[: len(done)] == done:
                    observation = list(prompt[len(done) :])
                    return Plan(prompt, True, observation)
            return Plan(list(prompt), False)
        if (
            last is not None
            and last.text
            and len(prompt) > len(last.text)
            and prompt.startswith(last.text)
        ):
            rest = prompt[len(last.text) :]
            closing = self._closing(last)
            eos_text = tokenizer.eos_token or ""
            if not closing and eos_text and rest.startswith(eos_text):
                rest = rest[len(eos_text) :]  # the model's own end-of-turn token is there
            observation = closing + tokenizer.encode(rest, add_special_tokens=False)
            return Plan(last.sequence_ids() + observation, True, observation, text=prompt)
        return Plan(tokenizer.encode(prompt, add_special_tokens=False), False, text=prompt)

    def _closing(self, last: Segment) -> list[int]:
        """The end-of-turn token after a turn that was cut short (none after one that
        ended on it)."""
        completion = last.turns[-1].completion
        if completion.finish_reason == "stop" or self._eos is None:
            return []
        return [self._eos]

    # --- recording the answer --------------------------------------------------------------

    def record(
        self,
        plan: Plan,
        completion: Completion,
        *,
        reply: dict[str, Any] | None,
        weight_version: int,
        info: dict[str, Any],
    ) -> None:
        """Adds the call's turn: to the last segment when the call extended it, else to a
        new segment (a rewrite, unless it is the first call)."""
        if plan.extends:
            segment = self.segments[-1]
            segment.turns[-1].observation_ids = plan.observation_ids
        else:
            if self.segments:
                self.rewrites += 1
            segment = Segment(plan.context_ids, [], weight_version, tools_key=plan.tools_key)
            self.segments.append(segment)
        segment.turns.append(Turn(completion, info=info))
        segment.history = [*plan.history, normalise(reply)] if reply is not None else []
        segment.text = plan.text + completion.text if plan.text else ""
        self.calls.append(CallRecord(plan.context_ids, completion, len(self.segments) - 1))

    def summary(self, *, failure: str | None) -> dict[str, Any]:
        """The episode's gateway counts, kept on its first turn's ``info["gateway"]``
        (``gateway_metrics``); ``failure``: the agent's error type, if it failed."""
        return {
            "calls": len(self.calls),
            "rewrites": self.rewrites,
            "tool_call_errors": self.tool_call_errors,
            "refused": self.refused,
            "reported_reward": self.reported_reward is not None,
            "reruns": self.reruns,
            "failure": failure,
        }

    def trajectory(self, *, fallback_prompt: list[int]) -> Trajectory:
        """The last segment as a Trajectory (``stop_reason`` from the gateway's refusal or
        the last turn's finish). Without any call: ``fallback_prompt`` and one empty turn,
        which trains nothing and scores as the agent's outcome says, at the version the
        episode opened with (never one older than its step's: ``driver/loop._staleness``)."""
        row, index = self.row, self.row.get("_index", self.index)
        if not self.segments:
            empty = Completion(token_ids=[], logprobs=[], finish_reason="stop", text="")
            return Trajectory(index, list(fallback_prompt), [Turn(empty)], self.version, row=row)
        last = self.segments[-1]
        stop = self.stop_reason
        if not stop:
            stop = "answered" if last.turns[-1].completion.finish_reason == "stop" else "max_tokens"
        return Trajectory(
            prompt_index=index,
            prompt_ids=last.prompt_ids,
            turns=last.turns,
            weight_version=last.weight_version,
            row=row,
            stop_reason=stop,
        )


def text_of(content: Any) -> str:
    """A message's content as text: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


def normalise(message: dict[str, Any]) -> tuple:
    """What the record compares of a message: role, text, tool calls (name and
    arguments), tool_call_id and name."""
    calls = tuple(
        (c.get("function", {}).get("name"), _arguments(c.get("function", {}).get("arguments")))
        for c in message.get("tool_calls") or []
    )
    return (
        message.get("role"),
        text_of(message.get("content")),
        calls,
        message.get("tool_call_id"),
        message.get("name") if message.get("role") != "assistant" else None,
    )


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return json.dumps(arguments, sort_keys=True)


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message as chat templates take it: text content, and tool-call arguments
    as objects (templates write them with ``tojson``)."""
    out = {k: v for k, v in message.items() if v is not None}
    out["content"] = text_of(message.get("content"))
    if message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            fn = dict(call.get("function", {}))
            if isinstance(fn.get("arguments"), str):
                with contextlib.suppress(ValueError):  # not JSON: kept as the text it is
                    fn["arguments"] = json.loads(fn["arguments"])
            calls.append({**call, "function": fn})
        out["tool_calls"] = calls
    return out


def gateway_metrics(trajectories: list[Trajectory], *, prefix: str = "") -> dict[str, float]:
    """Per episode (of those that ran through the gateway; {} when none did): model calls,
    history rewrites, refused tool calls (malformed, unknown, mistyped), refused calls,
    rewards reported by HTTP, agents that failed (raised, crashed, timed out), and agents
    run again because their worker died under another agent."""
    found = [t.turns[0].info["gateway"] for t in trajectories if "gateway" in t.turns[0].info]
    if not found:
        return {}
    n = len(found)
    failures = [g["failure"] for g in found if g["failure"]]
    per_episode = {
        "calls": sum(g["calls"] for g in found),
        "history_rewrites": sum(g["rewrites"] for g in found),
        "tool_call_errors": sum(g["tool_call_errors"] for g in found),
        "refused_calls": sum(g["refused"] for g in found),
        "reported_rewards": sum(g["reported_reward"] for g in found),
        "agent_errors": len(failures),
        "agent_timeouts": failures.count("TimeoutError"),
        "agent_reruns": sum(g.get("reruns", 0) for g in found),
    }
    return {f"{prefix}gateway/{name}": value / n for name, value in per_episode.items()}
