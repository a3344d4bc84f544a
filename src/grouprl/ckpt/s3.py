"""S3, the slowest checkpoint tier: upload, list, download and delete whole checkpoints.

    checkpointer thread ──► S3Store.upload_dir(run/checkpoints/step_000040, "step_000040")
                               │ 1. every file but the manifest (multipart above multipart_mb)
                               │ 2. HEAD each key; re-upload any that is missing or the wrong size
                               │ 3. manifest.json, strictly last
                               ▼
                 s3://bucket/prefix/step_000040/{model/..., trainer.pt, manifest.json}

Every call goes through ``S3Store._retry``. Connection errors, timeouts, throttling, 5xx and
NoSuchBucket (an endpoint that restarted and lost its buckets) are retried with exponential
backoff and jitter: forever for uploads (until ``stop`` is set), ``READ_ATTEMPTS`` times for
everything else. Any other error (access denied, bad credentials) raises ``S3Error`` at once.
Credentials come only from the standard AWS chain and are redacted from every message; log
lines carry error codes, never server messages.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable
from pathlib import Path
from threading import Event
from typing import TypeVar
from urllib.parse import urlsplit

import boto3.session
from boto3.s3.transfer import TransferConfig
from botocore import exceptions as bx
from botocore.config import Config

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_ATTEMPTS = 5  # downloads, listings, reads and deletes give up after this many tries
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_ENDPOINT = re.compile(r"https?://([\w.-]+|\[[0-9a-fA-F:.]+\])(:\d{1,5})?(/\S*)?")
# NoSuchBucket: a restarted S3-compatible server, which its operator may recreate.
# NoSuchUpload: a multipart upload the server forgot; the retry starts a new one.
_RETRY_CODES = frozenset(
    "NoSuchBucket NoSuchUpload RequestTimeout RequestTimeoutException SlowDown Throttling "  # noqa: SIM905
    "ThrottlingException TooManyRequestsException RequestLimitExceeded BandwidthLimitExceeded "
    "ServiceUnavailable InternalError".split()
)
_CREDENTIALS = (
    "Allowed: credentials from the standard AWS chain (AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or an instance/pod role), never in the recipe. "
    "Fix: export valid credentials or set AWS_PROFILE, then rerun."
)
_FIXES = dict.fromkeys(
    "NoCredentialsError PartialCredentialsError InvalidAccessKeyId SignatureDoesNotMatch "  # noqa: SIM905
    "ExpiredToken InvalidToken".split(),
    _CREDENTIALS,
) | {
    "AccessDenied": "Allowed: a bucket and prefix these credentials may list, read, write and "
    "delete. Fix: grant s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject there, "
    "or point checkpoint.s3.uri at a bucket you can write.",
    "NoSuchBucket": "Allowed: an existing bucket. Fix: create it (aws s3 mb s3://BUCKET) or "
    "correct the bucket name in checkpoint.s3.uri.",
}
_UNREACHABLE = (
    "Allowed: checkpoint.s3.endpoint_url null (AWS) or the http(s) URL of a reachable "
    "S3-compatible server. Fix: check that URL, the network and the server, then rerun."
)
_OTHER = "Fix: check checkpoint.s3.uri, checkpoint.s3.endpoint_url and the bucket's permissions."


class S3Error(RuntimeError):
    """An S3 problem the user can act on; the CLI prints it without a traceback."""

    user_error = True


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``"s3://bucket/some/prefix/"`` -> ``("bucket", "some/prefix")``; the prefix may be ""."""
    allowed = (
        "Allowed: s3://BUCKET or s3://BUCKET/PREFIX, BUCKET being 3-63 lowercase letters, "
        "digits, '.' or '-'. Fix: e.g. checkpoint.s3.uri=s3://my-bucket/runs/exp1"
    )
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise S3Error(f"checkpoint.s3.uri={uri!r} is not an S3 URI. {allowed}")
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    prefix = prefix.removesuffix("/")
    if not _BUCKET.fullmatch(bucket):
        raise S3Error(f"checkpoint.s3.uri={uri!r}: {bucket!r} is not a bucket name. {allowed}")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise S3Error(
            f"checkpoint.s3.uri={uri!r}: the prefix {prefix!r} has an empty, '.' or '..' "
            f"segment. {allowed}"
        )
    return bucket, prefix


def _check_endpoint(url: str | None) -> str | None:
    if url is None or (isinstance(url, str) and _ENDPOINT.fullmatch(url)):
        return url
    netloc = urlsplit(str(url)).netloc  # user:password@host must not be echoed
    shown = str(url).replace(netloc, "***@" + netloc.rpartition("@")[2]) if "@" in netloc else url
    raise S3Error(
        f"checkpoint.s3.endpoint_url={shown!r} is not an http(s) URL without credentials. "
        f"{_UNREACHABLE} e.g. checkpoint.s3.endpoint_url=http://127.0.0.1:9000"
    )


def _innermost(err: BaseException) -> BaseException:
    """The botocore error behind boto3/s3transfer wrappers (S3UploadFailedError, ...)."""
    for _ in range(8):
        if isinstance(err, bx.ClientError | bx.BotoCoreError):
            return err
        if not type(err).__module__.startswith(("boto3", "s3transfer")):
            return err
        inner = getattr(err, "last_exception", None) or err.__cause__ or err.__context__
        if inner is None:
            return err
        err = inner
    return err


def _classify(err: BaseException) -> tuple[str, bool]:
    """The error's code (or class name) and whether the same call may succeed if retried."""
    err = _innermost(err)
    if isinstance(err, bx.ClientError):
        code = str(err.response.get("Error", {}).get("Code", "Unknown"))
        status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        return code, code in _RETRY_CODES or status >= 500 or status == 429
    if isinstance(err, bx.SSLError):  # a certificate problem does not heal by waiting
        return type(err).__name__, False
    network = (bx.ConnectionError, bx.HTTPClientError, ConnectionError, TimeoutError)
    return type(err).__name__, isinstance(err, network)


class S3Store:
    """One bucket and prefix; every checkpoint is a "directory" ``<prefix>/<name>/``.

    Safe to call from a background thread (boto3 clients are thread-safe). Keys are never
    taken as arguments: boto3 reads the standard chain (env vars, shared files, roles).
    """

    def __init__(
        self,
        uri: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        multipart_mb: int = 64,
    ) -> None:
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.endpoint_url = _check_endpoint(endpoint_url)
        if not 0 < backoff_s <= max_backoff_s:
            raise ValueError(f"need 0 < backoff_s={backoff_s} <= max_backoff_s={max_backoff_s}")
        if multipart_mb < 5:
            raise ValueError(f"multipart_mb={multipart_mb} is below S3's 5 MiB minimum part size")
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self._session = boto3.session.Session(region_name=region)
        retries = {"max_attempts": 2, "mode": "standard"}  # our own loop retries for long
        path_style = {"addressing_style": "path"} if endpoint_url else None  # MinIO, Ceph, moto
        config = Config(connect_timeout=5, read_timeout=60, retries=retries, s3=path_style)
        self.client = self._session.client("s3", endpoint_url=self.endpoint_url, config=config)
        part = multipart_mb * 1024 * 1024
        self._transfer = TransferConfig(multipart_threshold=part, multipart_chunksize=part)

    def __repr__(self) -> str:
        return (
            f"S3Store(bucket={self.bucket!r}, prefix={self.prefix!r}, "
            f"endpoint_url={self.endpoint_url!r})"
        )

    def check(self) -> None:
        """Fail early (one attempt) if the bucket is missing, unreachable or forbidden."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as err:
            code, _ = _classify(err)
            code = {"404": "NoSuchBucket", "403": "AccessDenied"}.get(code, code)
            raise self._error(f"checking bucket {self.bucket!r}", code, err) from err

    def upload_dir(
        self,
        local: Path,
        name: str,
        *,
        last: str = "manifest.json",
        stop: Event | None = None,
    ) -> int:
        """Upload ``local`` to ``<prefix>/<name>/``, ``last`` strictly after everything else.

        Before ``last`` goes up, every other key is HEADed and any that is missing or the
        wrong size is uploaded again (a server that lost data while we retried must not get
        a manifest pointing at nothing). Retries forever; setting ``stop`` abandons the
        upload with ``S3Error``. Returns the bytes sent, re-uploads included.
        """
        local = Path(local)
        final = local / last
        if not final.is_file():
            raise FileNotFoundError(f"{final} is missing: {last!r} must exist to be sent last")
        paths = sorted(p for p in local.rglob("*") if p.is_file() and p != final)
        others = {self._key(f"{name}/{p.relative_to(local).as_posix()}"): p for p in paths}
        sent = sum(self._upload(path, key, stop) for key, path in others.items())
        while stale := [k for k, p in others.items() if self._size(k, stop) != p.stat().st_size]:
            log.warning("S3 re-uploading %d lost or short objects under %s", len(stale), name)
            sent += sum(self._upload(others[key], key, stop) for key in stale)
        return sent + self._upload(final, self._key(f"{name}/{last}"), stop)

    def download_dir(self, name: str, local: Path) -> None:
        """Download the whole ``<prefix>/<name>/`` tree into ``local``."""
        base = self._key(f"{name}/")
        keys = [key for key in self._list_keys(base) if not key.endswith("/")]
        if not keys:
            raise S3Error(
                f"{self._where()}: no checkpoint {name!r} there. Allowed: one of "
                f"{self.list_names()}. Fix: pick an existing checkpoint or the right uri."
            )
        for key in keys:
            rel = key[len(base) :]
            if ".." in rel.split("/"):
                raise S3Error(f"{self._where()}: refusing key {key!r}, it escapes {local}")
            dest = Path(local) / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            self._retry(
                f"download of {self._url(key)}",
                lambda key=key, dest=dest: self.client.download_file(
                    self.bucket, key, str(dest), Config=self._transfer
                ),
            )

    def list_names(self) -> list[str]:
        """The immediate child "directories" under the prefix, sorted."""
        base = self._key("")
        found = [
            cp["Prefix"]
            for page in self._list(base, Delimiter="/")
            for cp in page.get("CommonPrefixes", [])
        ]
        return sorted(p[len(base) :].rstrip("/") for p in found)

    def exists(self, key: str) -> bool:
        """Whether ``<prefix>/<key>`` exists (e.g. ``"step_000040/manifest.json"``).

        False also when the bucket is missing: a HEAD answers both with a bare 404."""
        return self._size(self._key(key), None, attempts=READ_ATTEMPTS) is not None

    def read_bytes(self, key: str) -> bytes:
        full = self._key(key)
        return self._retry(
            f"read of {self._url(full)}",
            lambda: self.client.get_object(Bucket=self.bucket, Key=full)["Body"].read(),
        )

    def delete_dir(self, name: str, *, first: str = "manifest.json") -> None:
        """Delete ``<prefix>/<name>/``, ``first`` before the rest so a half-deleted
        checkpoint never looks complete."""
        base = self._key(f"{name}/")
        head = base + first
        self._retry(
            f"delete of {self._url(head)}",
            lambda: self.client.delete_object(Bucket=self.bucket, Key=head),
        )
        keys = [key for key in self._list_keys(base) if key != head]
        for start in range(0, len(keys), 1000):  # delete_objects takes at most 1000 keys
            batch = {"Objects": [{"Key": k} for k in keys[start : start + 1000]], "Quiet": True}
            reply = self._retry(
                f"delete under {self._url(base)}",
                lambda batch=batch: self.client.delete_objects(Bucket=self.bucket, Delete=batch),
            )
            if failed := reply.get("Errors"):
                code, key = failed[0].get("Code", "Unknown"), failed[0].get("Key")
                msg = f"{len(failed)} objects were not deleted, e.g. {key!r}"
                raise S3Error(f"{self._where()}: {msg} ({code}). {_FIXES.get(code, _OTHER)}")

    def _retry(
        self,
        what: str,
        op: Callable[[], T],
        *,
        stop: Event | None = None,
        attempts: int | None = READ_ATTEMPTS,
    ) -> T:
        """Run ``op`` until it succeeds: the one retry loop behind every operation.

        Waits ``backoff_s * 2**n`` capped at ``max_backoff_s``, times a jitter in [0.5, 1).
        ``attempts=None`` (uploads) retries forever; ``stop`` abandons between attempts.
        """
        attempt = 0
        while not (stop is not None and stop.is_set()):
            attempt += 1
            try:
                return op()
            except Exception as err:
                if not isinstance(_innermost(err), bx.BotoCoreError | bx.ClientError):
                    raise  # local I/O errors and bugs propagate unchanged
                code, retryable = _classify(err)
                if not retryable or (attempts is not None and attempt >= attempts):
                    raise self._error(what, code, err, attempt=attempt) from err
                delay = min(self.max_backoff_s, self.backoff_s * 2 ** min(attempt - 1, 30))
                wait = delay * random.uniform(0.5, 1.0)
                log.warning(
                    "S3 %s: attempt %d failed (%s); retrying in %.2f s", what, attempt, code, wait
                )
                (stop or Event()).wait(wait)  # a sleep that ends early when stopped
        raise S3Error(
            f"{self._where()}: {what} abandoned after {attempt} attempts because the run is "
            "stopping; the checkpoint in S3 is incomplete (no manifest). Fix: nothing to do; "
            "the local tiers keep the checkpoint."
        )

    def _error(self, what: str, code: str, err: BaseException, *, attempt: int = 1) -> S3Error:
        _, retryable = _classify(err)
        inner = _innermost(err)
        network = isinstance(inner, bx.ConnectionError | bx.HTTPClientError)
        fix = _FIXES.get(code) or (_UNREACHABLE if network else _OTHER)
        tries = f" after {attempt} attempts" if retryable and attempt > 1 else ""
        detail = inner.response["Error"].get("Message") if isinstance(inner, bx.ClientError) else ""
        text = f"{self._where()}: {what} failed{tries} with {code}: {detail or err}. {fix}"
        return S3Error(self._redact(text))

    def _redact(self, text: str) -> str:
        try:  # the session caches what the client resolved; nothing is fetched on success paths
            found = self._session.get_credentials()
            frozen = found.get_frozen_credentials() if found else None
        except Exception:  # a refresh that fails must not hide the real error
            frozen = None
        for secret in (frozen.access_key, frozen.secret_key, frozen.token) if frozen else ():
            if secret:
                text = text.replace(secret, "***")
        return text

    def _where(self) -> str:
        uri = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        where = f"checkpoint.s3.uri={uri!r}"
        if self.endpoint_url:
            where += f" (checkpoint.s3.endpoint_url={self.endpoint_url!r})"
        return where

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _upload(self, path: Path, key: str, stop: Event | None) -> int:
        size = path.stat().st_size
        self._retry(
            f"upload of {self._url(key)}",
            lambda: self.client.upload_file(str(path), self.bucket, key, Config=self._transfer),
            stop=stop,
            attempts=None,
        )
        return size

    def _size(self, key: str, stop: Event | None, *, attempts: int | None = None) -> int | None:
        """The object's size, or None if it is missing (HEAD says 404, never NoSuchKey).
        Retries forever unless ``attempts`` is given: upload_dir must not give up."""

        def head() -> int | None:
            try:
                return self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"]
            except bx.ClientError as err:
                if _classify(err)[0] in ("404", "NoSuchKey"):
                    return None
                raise

        return self._retry(f"HEAD of {self._url(key)}", head, stop=stop, attempts=attempts)

    def _list(self, base: str, **options: str) -> list[dict]:
        """Every list_objects_v2 page under ``base``, retried as one operation."""
        paginator = self.client.get_paginator("list_objects_v2")
        return self._retry(
            f"listing of {self._url(base)}",
            lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=base, **options)),
        )

    def _list_keys(self, base: str) -> list[str]:
        return [obj["Key"] for page in self._list(base) for obj in page.get("Contents", [])]
