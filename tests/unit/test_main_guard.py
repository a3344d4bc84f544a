"""A script that starts a run where multiprocessing's spawn re-runs it (its top level,
outside ``if __name__ == "__main__":``) is refused: in the parent, from the script's
source, before anything loads; in a worker that re-runs it, by the worker's pool, which
fails every call with the fix instead of scoring them 0. No training: the scripts name
a recipe that does not exist, so a call that is let through fails on that at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.procs  # starts processes: make test-rest

REFUSED = "UnguardedMainError"
FIX = 'put the training call under `if __name__ == "__main__":`'
LET_THROUGH = "no-such-recipe"  # the ConfigError of a call the guard lets through

SCRIPTS = {
    "top_level": ("import grouprl\n\ngrouprl.train('no-such-recipe')\n", "script.py:3"),
    "in_a_function_called_at_top_level": (
        "import grouprl\n\ndef main():\n    grouprl.evaluate('m', 'no-such-recipe')\n\nmain()\n",
        "script.py:6",
    ),
    "guarded": (
        "import grouprl\n\nif __name__ == '__main__':\n    grouprl.train('no-such-recipe')\n",
        None,
    ),
    # spawn re-runs this script in a worker, but the parent cannot tell from the source:
    # left to the worker's check (tests/integration/test_no_run_on_zeros.py)
    "guard_that_lets_workers_in": (
        "import grouprl\n\nif __name__ in ('__main__', '__mp_main__'):\n"
        "    grouprl.train('no-such-recipe')\n",
        None,
    ),
}


def _run(args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("case", SCRIPTS)
def test_the_parent_refuses_a_run_started_at_the_scripts_top_level(tmp_path, case):
    source, where = SCRIPTS[case]
    (tmp_path / "script.py").write_text(source)
    done = _run(["script.py"], tmp_path)
    assert done.returncode != 0
    if where is None:
        assert REFUSED not in done.stderr and LET_THROUGH in done.stderr, done.stderr
        return
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"grouprl.sandbox.main_guard.{REFUSED}: "), done.stderr
    assert where in last and FIX in last and "spawn" in last


def test_spawn_does_not_rerun_a_packages_main_or_a_command(tmp_path):
    """`python -m pkg` (pkg/__main__.py) and `python -c` are not re-run in the workers:
    their top level may train."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__main__.py").write_text(SCRIPTS["top_level"][0])
    for args in (["-m", "pkg"], ["-c", SCRIPTS["top_level"][0]]):
        done = _run(args, tmp_path)
        assert REFUSED not in done.stderr and LET_THROUGH in done.stderr, done.stderr


POOL_SCRIPT = textwrap.dedent(
    """
    import grouprl
    from grouprl.config.containment import SandboxConfig
    from grouprl.sandbox import WorkerPool

    if __name__ != "__main__":  # a worker re-running this script
        grouprl.train("no-such-recipe")

    if __name__ == "__main__":
        with WorkerPool(SandboxConfig(workers=2, memory_mb=None), name="reward") as pool:
            queued = [pool.submit(abs, -k) for k in range(4)]
            for future in queued:
                error = future.exception(timeout=30)
                print(type(error).__name__, "|", error)
            later = pool.submit(abs, -1)
            print(type(later.exception(timeout=0)).__name__, "| later")
            print("started:", [pool.generation(k) for k in range(2)])
    """
)


def test_a_pool_whose_worker_reruns_a_training_script_fails_every_call(tmp_path):
    (tmp_path / "script.py").write_text(POOL_SCRIPT)
    done = _run(["script.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 6, done.stdout
    for line in lines[:4]:
        kind, message = line.split(" | ")
        assert kind == REFUSED and FIX in message
        assert f"a reward worker process re-imported the script {tmp_path / 'script.py'}" in line
    assert lines[4] == f"{REFUSED} | later"  # no worker is started again
    assert lines[5] == "started: [1, 1]"  # each worker once: none after the first exit
    assert "Traceback" not in done.stderr  # the workers exit quietly: the pool says why
