"""The gateway's HTTP side: routes, OpenAI-shaped errors, JSON and SSE answers.

POST /e/<episode>/v1/chat/completions   (or /v1/... with the episode as the API key)
  ──► gateway.episode_for(key) ──► gateway.chat / complete / report_reward / start ──► JSON
  GatewayError ──► {"error": {message, type, param, code}} with its 4xx status
"""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler
from typing import Any

logger = logging.getLogger("grouprl.rollout.gateway.server")


class GatewayError(Exception):
    """An OpenAI-shaped error answer."""

    def __init__(
        self, status: int, message: str, *, code: str, kind: str = "invalid_request_error"
    ):
        super().__init__(message)
        self.status, self.code, self.kind = status, code, kind

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": str(self), "type": self.kind, "param": None, "code": self.code}
        }


class GatewayHandler(BaseHTTPRequestHandler):
    """One HTTP request: routed by path (``/e/<episode>/v1/...``) or API key to the
    gateway (``server.gateway``), answered as JSON, or one SSE chunk with ``stream``."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def _answer(self, method: str) -> None:
        gateway = self.server.gateway
        stream = False
        try:
            key, route, by_path = self._route()
            body: dict[str, Any] = {}
            if method == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError as err:
                    raise GatewayError(
                        400, f"the body is not JSON: {err}", code="invalid_json"
                    ) from err
                if not isinstance(body, dict):
                    raise GatewayError(400, "the body must be a JSON object", code="invalid_json")
            if (method, route) == ("GET", "/v1/models") or route.startswith("/v1/models/"):
                self._send(
                    200, gateway.models() if route == "/v1/models" else gateway.models()["data"][0]
                )
                return
            handlers = {
                "/v1/chat/completions": gateway.chat,
                "/v1/completions": gateway.complete,
                "/reward": gateway.report_reward,
                "/v1/reward": gateway.report_reward,
                "/v1/start": gateway.start,
            }
            if method != "POST" or route not in handlers:
                raise GatewayError(404, f"no route {method} {self.path}", code="not_found")
            stream = bool(body.get("stream"))
            record = gateway.episode_for(key, by_path=by_path)
            answer = handlers[route](record, body)
        except GatewayError as err:
            self._send(err.status, err.body())
            return
        except Exception as err:  # a bug here must not hang the agent
            logger.exception("gateway error on %s", self.path)
            self._send(500, GatewayError(500, repr(err), code="internal_error").body())
            return
        if stream and route.endswith("/completions"):
            self._send_stream(answer)
        else:
            self._send(200, answer)

    def _route(self) -> tuple[str | None, str, bool]:
        path = self.path.split("?", 1)[0]
        if path.startswith("/e/"):
            _, _, key, *rest = path.split("/")
            return key, "/" + "/".join(rest), True
        auth = self.headers.get("Authorization") or ""
        key = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
        return key, path, False

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        self._write(status, "application/json", json.dumps(payload).encode())

    def _write(self, status: int, content_type: str, data: bytes) -> None:
        """Sends one answer. A client gone before it (its agent's worker died, or the agent
        timed out) is no error here: the agent runs again or fails on its own account."""
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            logger.debug("the client of %s left before its answer", self.path)

    def _send_stream(self, answer: dict[str, Any]) -> None:
        """The whole answer as one SSE chunk, then ``[DONE]``."""
        chunk = dict(answer)
        if answer["object"] == "chat.completion":
            chunk["object"] = "chat.completion.chunk"
            choice = answer["choices"][0]
            delta = dict(choice["message"])
            if "tool_calls" in delta:
                delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
            chunk["choices"] = [
                {
                    "index": 0,
                    "delta": delta,
                    "finish_reason": choice["finish_reason"],
                    "logprobs": choice["logprobs"],
                }
            ]
        data = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
        self._write(200, "text/event-stream", data)
