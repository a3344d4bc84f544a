"""A name that is no local path costs one hub try at most (issue 37, item 19): a run name
typed in the wrong directory is read as a path and never looked up; a hub-looking name
that is not cached asks the hub once, without retries, and the message says both that no
local directory of that name is here and what the hub said. Offline throughout: the hub
here is a loopback server that answers 503, or a closed port."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest
from huggingface_hub import constants

from cli_probe import run_cli
from grouprl.assets import ModelPathError
from grouprl.assets.hub import hub_problem
from grouprl.driver.eval_inputs import check_target

ALLOWED = "give a local directory"


@pytest.mark.procs
def test_a_run_name_in_the_wrong_directory_is_a_path_never_a_hub_lookup(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no runs/ here
    start = time.monotonic()
    [outcome], heavy = run_cli([["grouprl", "eval", "runs/no-such-run"]])
    assert outcome.code == "2", outcome
    text = " ".join(outcome.stderr.split())
    assert "TARGET='runs/no-such-run' not found" in text, text
    assert (
        "runs/ is where grouprl train writes runs" in text and "never looked up on the hub" in text
    )
    assert "internet" not in text
    assert heavy == [] and time.monotonic() - start < 30


def test_offline_a_hub_name_not_in_the_cache_is_not_looked_up(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelPathError) as raised:
        check_target("no-such-org/no-such-model")
    said = str(raised.value)
    name = "no-such-org/no-such-model"
    assert f"TARGET={name!r}: no local directory {name} here ({tmp_path})" in said
    assert "HF_HUB_OFFLINE is set" in said and "not looked up" in said and "Fix:" in said


class _Hub(BaseHTTPRequestHandler):
    calls: ClassVar[list[str]] = []

    def do_HEAD(self):
        _Hub.calls.append(self.path)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def online(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def test_an_unreachable_hub_is_asked_once_without_retries(online, tmp_path):
    _Hub.calls = []
    server = HTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_port}"
        start = time.monotonic()
        said = hub_problem("some-org/some-model", key="TARGET", allowed=ALLOWED, endpoint=endpoint)
        took = time.monotonic() - start
    finally:
        server.shutdown()
    assert len(_Hub.calls) == 1, _Hub.calls  # huggingface_hub alone would retry a 503 5 times
    assert took < 5, took
    assert said is not None and said.startswith(
        f"TARGET='some-org/some-model': no local directory some-org/some-model here ({tmp_path})"
    )
    assert "the Hugging Face hub could not be reached in one try of 10 s" in said
    assert f"Fix: {ALLOWED}" in said


def test_no_network_is_one_failed_connection_and_says_so(online):
    with socket.socket() as s:  # a port nobody listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    said = hub_problem(
        "org/model", key="TARGET", allowed=ALLOWED, endpoint=f"http://127.0.0.1:{port}"
    )
    assert time.monotonic() - start < 5
    assert said is not None and "could not be reached in one try" in said and "Connect" in said
