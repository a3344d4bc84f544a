"""S3Store against a real S3-compatible server (moto) on 127.0.0.1, including an outage.

Nothing here reaches AWS: ``aws_env`` sets fake credentials and disables profiles and
instance metadata; every client points at the loopback server the tests start.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from grouprl.ckpt.s3 import S3Error, S3Store, parse_s3_uri
from s3_server import MotoServer, free_port

pytestmark = pytest.mark.s3

MiB = 1024 * 1024
SECRET = "Sup3rSecretValue-must-never-print"
LOGGER = "grouprl.ckpt.s3"


def _admin(server: MotoServer):
    """A plain client for setting up and inspecting the server behind S3Store's back."""
    return boto3.client("s3", endpoint_url=server.endpoint_url, config=Config(retries={}))


def _objects(server: MotoServer, bucket: str, prefix: str) -> dict[str, int]:
    pages = _admin(server).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


def _checkpoint(root: Path, *, big_mib: int = 0, small: int = 3) -> dict[str, bytes]:
    """A checkpoint-shaped directory; returns relative path -> bytes."""
    files = {f"model/shard_{i}.distcp": os.urandom(64 * 1024 + i) for i in range(small)}
    files |= {
        "trainer.json": b'{"step": 40}',
        "nested/a/b/empty.bin": b"",
        "manifest.json": b'{"files": "..."}',
    }
    if big_mib:
        files["model/big.distcp"] = os.urandom(big_mib * MiB)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def _read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _wait_for(cond: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _record(store: S3Store, *operations: str) -> list[tuple[str, str]]:
    """(operation, key) for every call of these operations, in the order they are made."""
    calls: list[tuple[str, str]] = []
    for op in operations:
        store.client.meta.events.register(
            f"before-parameter-build.s3.{op}",
            lambda params, op=op, **_: calls.append((op, params["Key"])),
        )
    return calls


def _fake_error(store: S3Store, operation: str, *, status: int, code: str, message: str) -> None:
    """Answer every ``operation`` with this S3 error, as a real server would."""
    body = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()

    class Raw:
        def stream(self, **_):
            yield body

    store.client.meta.events.register(
        f"before-send.s3.{operation}",
        lambda request, **_: AWSResponse(request.url, status, {}, Raw()),
    )


@pytest.fixture
def bucket(s3_server: MotoServer, aws_env: dict[str, str]) -> str:
    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    _admin(s3_server).create_bucket(Bucket=name)
    return name


def test_round_trip_with_multipart(s3_server: MotoServer, bucket: str, tmp_path: Path) -> None:
    files = _checkpoint(tmp_path / "src", big_mib=12)
    _checkpoint(tmp_path / "later")
    store = S3Store(
        f"s3://{bucket}/runs/exp1/", endpoint_url=s3_server.endpoint_url, multipart_mb=5
    )
    store.check()
    calls = _record(store, "UploadPart")

    sent = store.upload_dir(tmp_path / "src", "step_000040")
    store.upload_dir(tmp_path / "later", "step_000080")

    assert sent == sum(len(data) for data in files.values())
    assert calls == [("UploadPart", "runs/exp1/step_000040/model/big.distcp")] * 3  # 5+5+2 MiB
    stored = _objects(s3_server, bucket, "runs/exp1/step_000040/")
    assert stored == {f"runs/exp1/step_000040/{rel}": len(data) for rel, data in files.items()}
    assert store.list_names() == ["step_000040", "step_000080"]
    assert store.exists("step_000040/manifest.json")
    assert not store.exists("step_000040/missing.json")
    assert store.read_bytes("step_000040/trainer.json") == files["trainer.json"]

    store.download_dir("step_000040", tmp_path / "dst")
    assert _read_tree(tmp_path / "dst") == files

    store.delete_dir("step_000040")
    assert _objects(s3_server, bucket, "runs/exp1/step_000040/") == {}
    assert store.list_names() == ["step_000080"]


def test_manifest_goes_last_after_every_other_key_is_verified(
    s3_server: MotoServer, bucket: str, tmp_path: Path
) -> None:
    files = _checkpoint(tmp_path / "src", big_mib=6)
    store = S3Store(f"s3://{bucket}", endpoint_url=s3_server.endpoint_url, multipart_mb=5)
    calls = _record(store, "PutObject", "CompleteMultipartUpload", "HeadObject")

    store.upload_dir(tmp_path / "src", "step_000001")

    others = {f"step_000001/{rel}" for rel in files if rel != "manifest.json"}
    uploads = [key for op, key in calls if op != "HeadObject"]
    heads = [key for op, key in calls if op == "HeadObject"]
    assert uploads[-1] == "step_000001/manifest.json"
    assert set(uploads[:-1]) == others and len(uploads) == len(files)
    assert set(heads) == others  # each checked once, none re-uploaded
    last_other = max(i for i, (op, key) in enumerate(calls) if op != "HeadObject" and key in others)
    first_head = min(i for i, (op, _) in enumerate(calls) if op == "HeadObject")
    assert last_other < first_head and calls[-1] == ("PutObject", "step_000001/manifest.json")


def test_upload_survives_a_server_restart_that_loses_data(
    s3_server: MotoServer, bucket: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    files = _checkpoint(tmp_path / "src", small=4)
    store = S3Store(
        f"s3://{bucket}/p", endpoint_url=s3_server.endpoint_url, backoff_s=0.2, max_backoff_s=1.0
    )
    first_put, server_down = threading.Event(), threading.Event()

    def hold_after_first_put(**_) -> None:  # runs in the upload thread, after the server said OK
        if not first_put.is_set():
            first_put.set()
            server_down.wait(timeout=30)

    store.client.meta.events.register("after-call.s3.PutObject", hold_after_first_put)
    result: dict[str, object] = {}

    def upload() -> None:
        try:
            result["sent"] = store.upload_dir(tmp_path / "src", "step_000002")
        except BaseException as err:  # reported by the assertions below
            result["error"] = err

    thread = threading.Thread(target=upload, daemon=True)
    thread.start()
    retries = lambda: [r for r in caplog.records if "attempt" in r.getMessage()]
    try:
        assert first_put.wait(timeout=20)
        s3_server.stop()  # moto forgets the bucket and the object it just stored
        server_down.set()
        assert _wait_for(lambda: len(retries()) >= 2, timeout_s=15)
        time.sleep(1.0)
        assert thread.is_alive() and "error" not in result
    finally:
        server_down.set()
        if not s3_server.running:
            s3_server.start()
    _admin(s3_server).create_bucket(Bucket=bucket)
    thread.join(timeout=30)

    assert not thread.is_alive() and "error" not in result, result
    total = sum(len(data) for data in files.values())
    assert _objects(s3_server, bucket, "p/step_000002/") == {
        f"p/step_000002/{rel}": len(data) for rel, data in files.items()
    }
    assert result["sent"] > total  # the file lost in the outage went up twice
    line = re.compile(r"S3 upload of s3://\S+/p/step_000002/\S+: attempt \d+ failed \(\w+\); ")
    assert any(line.match(r.getMessage()) for r in retries())
    assert any("re-uploading" in r.getMessage() for r in caplog.records)


def test_stop_abandons_a_retrying_upload(
    s3_server: MotoServer, aws_env: dict[str, str], tmp_path: Path, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    _checkpoint(tmp_path / "src", small=1)
    missing = f"never-created-{uuid.uuid4().hex[:8]}"
    store = S3Store(
        f"s3://{missing}", endpoint_url=s3_server.endpoint_url, backoff_s=0.2, max_backoff_s=0.4
    )
    stop = threading.Event()
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    started = time.monotonic()
    with pytest.raises(S3Error, match="abandoned") as info:
        store.upload_dir(tmp_path / "src", "step_000003", stop=stop)
    timer.cancel()
    assert time.monotonic() - started < 5
    assert "checkpoint.s3.uri" in str(info.value)
    assert any("(NoSuchBucket)" in r.getMessage() for r in caplog.records)


def test_non_retryable_error_raises_at_once(
    s3_server: MotoServer, bucket: str, tmp_path: Path, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    _checkpoint(tmp_path / "src", small=1)
    store = S3Store(f"s3://{bucket}", endpoint_url=s3_server.endpoint_url, backoff_s=5.0)
    _fake_error(store, "PutObject", status=403, code="AccessDenied", message="Access Denied")
    stop = threading.Event()  # a regression that retries fails with "abandoned", not a hang
    timer = threading.Timer(3.0, stop.set)
    timer.start()
    started = time.monotonic()
    with pytest.raises(S3Error) as info:
        store.upload_dir(tmp_path / "src", "step_000004", stop=stop)
    timer.cancel()
    assert time.monotonic() - started < 3  # no 5 s backoff: no retry at all
    assert "abandoned" not in str(info.value)
    assert "AccessDenied" in str(info.value) and "s3:PutObject" in str(info.value)
    assert "checkpoint.s3.uri" in str(info.value)
    assert [r for r in caplog.records if r.name == LOGGER] == []
    assert _objects(s3_server, bucket, "") == {}


def test_download_gives_up_after_bounded_attempts(aws_env: dict[str, str], tmp_path: Path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    store = S3Store("s3://some-bucket/x", endpoint_url=nobody, backoff_s=0.05, max_backoff_s=0.1)
    with pytest.raises(S3Error, match="after 5 attempts") as info:
        store.download_dir("step_000005", tmp_path / "dst")
    assert "checkpoint.s3.endpoint_url" in str(info.value) and nobody in str(info.value)
    assert len([r for r in caplog.records if r.name == LOGGER]) == 4


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://bucket/some/prefix/", ("bucket", "some/prefix")),
        ("s3://bucket/some/prefix", ("bucket", "some/prefix")),
        ("s3://my.bucket-1/", ("my.bucket-1", "")),
        ("s3://my.bucket-1", ("my.bucket-1", "")),
    ],
)
def test_parse_s3_uri(uri: str, expected: tuple[str, str]) -> None:
    assert parse_s3_uri(uri) == expected


@pytest.mark.parametrize(
    "uri",
    [
        "bucket/prefix",
        "https://bucket/x",
        "S3://bucket",
        "s3://",
        "s3://ab",
        "s3://Bad_Bucket/x",
        "s3://bucket//x",
        "s3://bucket/a/../b",
        "",
    ],
)
def test_bad_uri_names_the_key_and_the_fix(uri: str) -> None:
    with pytest.raises(S3Error) as info:
        S3Store(uri)
    message = str(info.value)
    assert f"checkpoint.s3.uri={uri!r}" in message
    assert "Allowed: s3://BUCKET" in message and "Fix:" in message


@pytest.mark.parametrize("url", ["localhost:9000", "ftp://host", "http://", "http://h:port"])
def test_bad_endpoint_names_the_key(url: str) -> None:
    with pytest.raises(S3Error, match=re.escape(f"checkpoint.s3.endpoint_url={url!r}")):
        S3Store("s3://bucket", endpoint_url=url)


def test_check_reports_missing_bucket_credentials_and_endpoint(
    s3_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    S3Store(f"s3://{bucket}/x", endpoint_url=s3_server.endpoint_url).check()  # exists: passes

    with pytest.raises(S3Error) as info:
        S3Store("s3://no-such-bucket-here/x", endpoint_url=s3_server.endpoint_url).check()
    assert "checkpoint.s3.uri='s3://no-such-bucket-here/x'" in str(info.value)
    assert "NoSuchBucket" in str(info.value) and "aws s3 mb" in str(info.value)

    nobody = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(S3Error, match=r"checkpoint.s3.endpoint_url") as info:
        S3Store(f"s3://{bucket}", endpoint_url=nobody).check()
    assert "EndpointConnectionError" in str(info.value)

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key)
    with pytest.raises(S3Error, match="NoCredentialsError") as info:
        S3Store(f"s3://{bucket}", endpoint_url=s3_server.endpoint_url).check()
    assert "AWS_ACCESS_KEY_ID" in str(info.value) and "checkpoint.s3.uri" in str(info.value)


def test_credentials_never_shown(
    s3_server: MotoServer, bucket: str, tmp_path: Path, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA-" + SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    endpoint = s3_server.endpoint_url
    _checkpoint(tmp_path / "src", small=1)
    messages = []
    store = S3Store(f"s3://{bucket}", endpoint_url=endpoint, backoff_s=0.05, max_backoff_s=0.1)
    messages.append(repr(store))
    failing = [
        lambda: S3Store("s3://no-such-bucket-here", endpoint_url=endpoint).check(),
        lambda: store.download_dir("step_404", tmp_path / "dst"),
        lambda: store.read_bytes("step_404/manifest.json"),
        lambda: S3Store("s3://xyz", endpoint_url=f"http://me:{SECRET}@127.0.0.1:1"),
        lambda: store.upload_dir(tmp_path / "src", "s", stop=threading.Event()),
    ]
    # A server that echoes the keys back (some S3-compatible ones do) must be redacted too.
    _fake_error(store, "PutObject", status=403, code="InvalidAccessKeyId", message=SECRET)
    for call in failing:
        with pytest.raises(S3Error) as info:
            call()
        messages.append(str(info.value))
    assert "checkpoint.s3.endpoint_url='http://***@127.0.0.1:1'" in messages[-2]
    assert "InvalidAccessKeyId: ***" in messages[-1]
    assert not [m for m in messages if SECRET in m]
    assert SECRET not in caplog.text
