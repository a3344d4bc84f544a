"""An OpenAI-compatible endpoint on 127.0.0.1 in front of the rollout engine, for agents
that run their own loop (``env.agent``); it records every call token-exactly.

::

    agent (openai client, base_url=http://127.0.0.1:PORT/e/<episode>/v1)
        │ POST /chat/completions {messages, tools, max_tokens}       (HTTP thread per call)
        ▼
    EpisodeRecord.plan_chat ──► context ids (extends the episode, or a new segment)
        │ TurnLimits (rollout/turns.py): env.max_turns, rollout.max_model_len ──► refused
        │ pending requests ──► batcher thread: waits until every live episode has a
        │                      request waiting, or BATCH_WAIT_S pass (a tick), then
        ▼                      TurnEngine: ONE engine.generate, each request's max_tokens
    Completion (engine ids, logprobs) ──► assistant message (tool calls parsed) ──► agent
        └─► EpisodeRecord.record ──► Trajectory (gateway_record.py)

Routes (``/e/<episode>`` prefix, or ``/v1/...`` with the episode as the API key):
``POST /v1/chat/completions``, ``POST /v1/completions``, ``GET /v1/models``,
``POST /reward`` (``{"reward": x}``), ``POST /v1/start`` (the agent's worker, before
``solve``: a second start is a rerun, and the episode starts over). Errors are
OpenAI-shaped (``{"error": {message, type, param, code}}``) with a 4xx status, never one
the openai client retries (408, 409, 429): a closed episode is 410, an unknown one 401.

Sampling is the run's (``rollout.temperature``, ``top_p``, ``top_k``: on-policy); a
request's ``max_tokens`` / ``max_completion_tokens`` can only lower ``rollout.max_tokens``
and the room left in ``rollout.max_model_len``; its ``temperature``, ``stop``, ``seed`` and
the like are ignored. ``n`` must be 1. ``stream: true`` answers with a single SSE chunk and
``[DONE]``. Tool calls are parsed (``qwen`` format) only when the request lists ``tools``
and ``tool_choice`` is not ``none``; no decoding is constrained.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import ThreadingHTTPServer
from typing import Any, NoReturn

from grouprl.engines.base import RolloutEngine, SamplingSettings
from grouprl.engines.segments import GenerationAborted
from grouprl.rollout.gateway.http import GatewayError, GatewayHandler
from grouprl.rollout.gateway.record import EpisodeRecord, Plan
from grouprl.rollout.turns import LimitHit, TurnEngine, TurnLimits, first_version
from grouprl.tools.wire import assistant_reply, request_tools
from grouprl.types import Completion

logger = logging.getLogger(__name__)

BATCH_WAIT_S = 0.02
"""How long the first waiting request waits for other live episodes' requests."""

_REFUSALS = {"max_turns": "max_turns_exceeded", "context_overflow": "context_length_exceeded"}
"""The error code of a call refused at a limit, by the episode's stop reason."""


@dataclass
class _Request:
    record: EpisodeRecord
    context_ids: list[int]
    max_tokens: int
    done: threading.Event = field(default_factory=threading.Event)
    completion: Completion | None = None
    error: BaseException | None = None


@dataclass
class GatewayStats:
    requests: int = 0
    engine_calls: int = 0
    batched: int = 0
    """Requests answered by engine calls (batched / engine_calls: the mean batch)."""
    refused: int = 0


class Gateway:
    """Serves ``engine`` to the agents of one rollout; ``open`` an episode per agent."""

    def __init__(
        self,
        *,
        engine: RolloutEngine,
        tokenizer,
        settings: SamplingSettings,
        max_model_len: int,
        max_turns: int,
        model_name: str = "grouprl-policy",
        batch_wait_s: float = BATCH_WAIT_S,
    ) -> None:
        self.engine, self.tokenizer = engine, tokenizer
        self.turns = TurnEngine(engine, replace(settings, group_size=1))
        self.limits = TurnLimits(
            max_turns=max_turns,
            max_model_len=max_model_len,
            max_tokens=settings.max_tokens,
            whole_turns=False,  # each call gets the room left in its context
        )
        self.model_name, self.batch_wait_s = model_name, batch_wait_s
        eos = tokenizer.eos_token
        self._eos_id = tokenizer.convert_tokens_to_ids(eos) if eos else None
        self.episodes: dict[str, EpisodeRecord] = {}
        self._live: set[str] = set()
        self._episode_locks: dict[str, threading.Lock] = {}
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._closing = False
        self.stats = GatewayStats()
        self.engine_error: BaseException | None = None
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # --- episodes --------------------------------------------------------------------------

    def open(self, *, index: int, row: dict[str, Any]) -> str:
        """A new episode (``index``: its position in the rollout); returns its key."""
        key = f"ep{index}-{secrets.token_hex(6)}"
        with self._cond:
            self.episodes[key] = EpisodeRecord(
                key=key,
                index=index,
                row=row,
                eos_id=self._eos_id,
                version=self.engine.weight_version,
            )
            self._episode_locks[key] = threading.Lock()
            self._live.add(key)
        return key

    def base_url(self, key: str) -> str:
        return f"{self.url}/e/{key}/v1"

    @property
    def url(self) -> str:
        assert self._server is not None, "the gateway is not serving"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def finish(self, key: str) -> None:
        """The episode's agent is done (returned, failed, or past its deadline): its later
        calls are refused and a request still waiting is answered with an error."""
        with self._cond:
            self._live.discard(key)
            for req in [r for r in self._pending if r.record.key == key]:
                self._pending.remove(req)
                req.error = GatewayError(410, "the episode is closed", code="episode_closed")
                req.done.set()
            self._cond.notify_all()

    # --- serving ---------------------------------------------------------------------------

    @contextmanager
    def serving(self) -> Iterator[Gateway]:
        """Listens on a free 127.0.0.1 port and batches requests until the block ends."""
        self._server = _Server(("127.0.0.1", 0), GatewayHandler)
        self._server.daemon_threads = True
        self._server.gateway = self  # type: ignore[attr-defined]
        self._threads = [
            threading.Thread(
                target=self._server.serve_forever, name="grouprl-gateway", daemon=True
            ),
            threading.Thread(target=self._batch_loop, name="grouprl-gateway-batch", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            with self._cond:
                self._closing = True
                self._live.clear()
                self._cond.notify_all()
            self._server.shutdown()
            self._server.server_close()
            for thread in self._threads:
                thread.join(timeout=5)

    def _batch_loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if self._closing:
                    for req in self._pending:
                        req.error = GatewayError(410, "the rollout is over", code="episode_closed")
                        req.done.set()
                    self._pending = []
                    return
                start = time.monotonic()
                while len(self._pending) < len(self._live) and not self._closing:
                    left = start + self.batch_wait_s - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch, self._pending = self._pending, []
            self._generate(batch)

    def _generate(self, batch: list[_Request]) -> None:
        """The tick's completions in one engine call (``TurnEngine``), each request within
        its own max_tokens; an engine failure fails the whole batch."""
        try:
            groups = self.turns.generate(
                [r.context_ids for r in batch], max_tokens=[r.max_tokens for r in batch]
            )
        except BaseException as err:  # the rollout re-raises it (``engine_error``)
            if isinstance(err, GenerationAborted):  # the stream stops: expected, no traceback
                logger.info("a gateway batch of %d requests stopped: %s", len(batch), err)
            else:
                logger.exception("the rollout engine failed on a gateway batch")
            self.engine_error = err
            for req in batch:
                req.error = GatewayError(500, f"engine error: {err}", code="engine_error")
                req.done.set()
            return
        finally:
            self.stats.engine_calls = self.turns.calls
        self.stats.batched += len(batch)
        for req, (completion,) in zip(batch, groups, strict=True):
            req.completion = completion
            req.done.set()

    # --- requests --------------------------------------------------------------------------

    def episode_for(self, key: str | None, *, by_path: bool) -> EpisodeRecord:
        record = self.episodes.get(key or "")
        if record is None:
            where = "episode in the URL" if by_path else "API key (the episode id)"
            raise GatewayError(
                401, f"unknown {where} {key!r}", code="invalid_api_key", kind="authentication_error"
            )
        if key not in self._live:
            record.refused += 1
            self.stats.refused += 1
            raise GatewayError(410, f"episode {key} is closed", code="episode_closed")
        return record

    def chat(self, record: EpisodeRecord, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise GatewayError(400, "messages must be a non-empty list", code="invalid_messages")
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise GatewayError(400, "each message needs a role", code="invalid_messages")
        _check_n(body)
        tools = body.get("tools") or None
        try:
            toolset = request_tools(tools) if tools else None
        except ValueError as err:
            raise GatewayError(400, str(err), code="invalid_tools") from err
        parse = toolset if body.get("tool_choice") != "none" else None
        with self._episode_locks[record.key]:
            plan = record.plan_chat(messages, tools=tools, tokenizer=self.tokenizer)
            completion = self._complete(record, plan, body)
            reply = assistant_reply(completion.text, tools=parse)
            record.tool_call_errors += len(reply.errors)
            info = {"tool_calls": reply.calls_found, "tool_errors": len(reply.errors)}
            self._record(record, plan, completion, reply.message(), info)
        finish = "tool_calls" if reply.tool_calls else completion.finish_reason
        choice: dict[str, Any] = {"index": 0, "message": reply.message(), "finish_reason": finish}
        choice["logprobs"] = self._logprobs(completion) if body.get("logprobs") else None
        return self._envelope("chat.completion", choice, plan, completion)

    def complete(self, record: EpisodeRecord, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        ids = isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)
        if not (isinstance(prompt, str) and prompt) and not (ids and prompt):
            raise GatewayError(
                400, "prompt must be one string or one list of token ids", code="invalid_prompt"
            )
        _check_n(body)
        with self._episode_locks[record.key]:
            plan = record.plan_text(prompt, tokenizer=self.tokenizer)
            completion = self._complete(record, plan, body)
            self._record(record, plan, completion, None, {})
        choice = {
            "index": 0,
            "text": completion.text,
            "finish_reason": completion.finish_reason,
            "logprobs": None,
        }
        return self._envelope("text_completion", choice, plan, completion)

    def _complete(self, record: EpisodeRecord, plan: Plan, body: dict[str, Any]) -> Completion:
        """The engine's completion of ``plan``'s context, through the batcher."""
        hit = self.limits.turn_limit(len(record.calls))
        if hit is not None:
            self._refuse(record, hit)
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        if asked is not None and (not isinstance(asked, int) or asked < 1):
            raise GatewayError(
                400, f"max_tokens={asked!r} must be a positive integer", code="invalid_max_tokens"
            )
        context_len = len(plan.context_ids)
        hit = self.limits.context_limit(context_len)
        if hit is not None:
            self._refuse(record, hit)
        max_tokens = self.limits.turn_tokens(context_len, asked=asked)
        req = _Request(record, plan.context_ids, max_tokens)
        with self._cond:
            if record.key not in self._live:
                raise GatewayError(410, f"episode {record.key} is closed", code="episode_closed")
            self._pending.append(req)
            self.stats.requests += 1
            self._cond.notify_all()
        req.done.wait()
        if req.error is not None:
            raise req.error
        assert req.completion is not None
        return req.completion

    def _refuse(self, record: EpisodeRecord, hit: LimitHit) -> NoReturn:
        """Refuses a call at a limit, which ends the episode (its stop reason)."""
        record.stop_reason = hit.stop_reason
        record.refused += 1
        self.stats.refused += 1
        raise GatewayError(400, hit.message, code=_REFUSALS[hit.stop_reason])

    def _record(self, record, plan, completion, reply, info) -> None:
        with self._cond:
            if record.key not in self._live:  # past the deadline while generating
                raise GatewayError(410, f"episode {record.key} is closed", code="episode_closed")
            version = first_version(completion, self.engine)  # not a push's after it
        record.record(plan, completion, reply=reply, weight_version=version, info=info)

    def _envelope(self, kind, choice, plan: Plan, completion: Completion) -> dict[str, Any]:
        prompt, generated = len(plan.context_ids), len(completion.token_ids)
        return {
            "id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{secrets.token_hex(8)}",
            "object": kind,
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": generated,
                "total_tokens": prompt + generated,
            },
        }

    def _logprobs(self, completion: Completion) -> dict[str, Any]:
        tokens = [self.tokenizer.decode([t]) for t in completion.token_ids]
        return {
            "content": [
                {"token": s, "logprob": lp, "bytes": list(s.encode()), "top_logprobs": []}
                for s, lp in zip(tokens, completion.logprobs, strict=True)
            ]
        }

    def report_reward(self, record: EpisodeRecord, body: dict[str, Any]) -> dict[str, Any]:
        value = body.get("reward")
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise GatewayError(400, f"reward={value!r} must be a number", code="invalid_reward")
        record.reported_reward = float(value)
        return {"ok": True}

    def start(self, record: EpisodeRecord, body: dict[str, Any]) -> dict[str, Any]:
        """The episode's agent starts (``worker.start_episode``, before ``solve``). A second
        start is a rerun (the pool runs an agent again, alone, when its worker died under
        another agent): the episode starts over with an empty record, so the lost run's
        calls are not in its trajectory; a call of the lost run still waiting on the engine
        records into the old record, which nothing reads."""
        with self._cond:
            if record.started:
                self.episodes[record.key] = record.rerun()
                self._episode_locks[record.key] = threading.Lock()
            else:
                record.started = True
        return {"ok": True}

    def models(self) -> dict[str, Any]:
        entry = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "grouprl"}
        return {"object": "list", "data": [entry]}


class _Server(ThreadingHTTPServer):
    """The gateway's listener, with room for every agent's connection at once: a step
    starts all its episodes together, more than socketserver's default backlog of 5."""

    request_queue_size = 1024


def _check_n(body: dict[str, Any]) -> None:
    if body.get("n", 1) != 1:
        raise GatewayError(
            400, f"n={body.get('n')!r}: the gateway answers n=1 only", code="invalid_n"
        )
