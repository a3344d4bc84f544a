"""The ``math_verify`` reward: Hugging Face math-verify's ``parse`` and ``verify`` of a
completion's answer against the row's reference, with its timeouts working where reward
calls run: in threads of the reward worker processes.

math-verify 0.9.0 times out each parse and each comparison with ``signal.alarm``, which
only a process's main thread may set; a reward call runs on a worker's call thread
(``sandbox/worker.py``), where math-verify raises ValueError on every call (verl's silent
all-zero MATH rewards came from that). So its own alarm is off here (``parsing_timeout``
and ``timeout_seconds`` None) and this module rings it instead::

    call thread:  parse(reference) ─ parse(completion) ─ verify(gold, answer) ─► score
                       ▲ math-verify's TimeoutException, raised in this thread
    alarm thread: ─────┴ timeout_s after the call started, then every 0.25 s until
                         the call ends (PyThreadState_SetAsyncExc)

math-verify's handlers catch its ``TimeoutException`` (a BaseException, so sympy's
``except Exception`` blocks do not swallow it) as they would their alarm's; the call then
fails with ``TimeoutError`` rather than score 0, so a grader that could not decide never
trains the policy (``reward.on_error``). The exception lands between Python bytecodes:
a computation stuck inside one C call (a huge integer power) is not interrupted, and the
reward worker's deadline (``reward.sandbox.timeout_s``) kills it instead, as it kills any
reward call.

The reference: the text after the last ``####`` when it has one (GSM8K), then, unless it
already holds LaTeX math (``$``, ``\\(``, ``\\[``, ``\\boxed``), wrapped in ``\\boxed{}``
as verl's math-verify scorer does, since math-verify reads a bare ``x+1`` or ``\\{1,2\\}``
as no answer. A reference that is no answer fails the call (a data problem, not a wrong
completion; verl's scorer gives such a row 0 for every completion)::

    parses to nothing                                ""  "####"
    a placeholder for a missing answer               "N/A"  "none"  "unknown"  "-"  "?"
    prose: no LaTeX of its own, and math-verify      "see text" (s*e*E*t*t*x*...),
    reads a word (3 or more letters) as a product    "Yes" (E*s*y); "$abc$" is math
    of its letters

The completion is parsed as math-verify's defaults say (LaTeX and plain expressions; the
last ``\\boxed{}`` first).
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading
from collections.abc import Callable
from typing import Any

TIMEOUT_S = 5.0
"""The budget of one call, parsing and comparison together: math-verify's default for one
parse, and half of ``reward.sandbox.timeout_s``'s default, so it rings before the worker's
deadline kills the worker."""

_LATEX_MATH = ("$", "\\(", "\\[", "\\boxed")
MISSING_ANSWERS = frozenset(
    {"", "n/a", "na", "n.a.", "none", "null", "nan", "unknown", "tbd", "-", "--", "?"}
)
"""References (lowercased, spaces, ``$`` and ``\\text{}`` dropped) that stand for no answer."""
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
"""A run of three or more letters not part of a LaTeX command (``\\frac``): a word (two,
``xy``, is as often a product as a word)."""


def math_verify_score(
    completion: str, *, reference: object, timeout_s: float = TIMEOUT_S, **_: object
) -> float:
    """1.0 if math-verify finds the completion's answer equal to the reference's, else 0.0.

    Raises ``TimeoutError`` past ``timeout_s`` seconds (from any thread), and
    ``ValueError`` when the reference is no answer (module docstring). A different budget:
    ``register_reward("math_verify_2s", functools.partial(math_verify_score, timeout_s=2))``.
    """
    _quiet_timeout_warnings()
    text = gold_text(reference)
    if _placeholder(text):
        raise ValueError(
            f"math_verify: the reference {str(reference)[:120]!r} stands for a missing "
            "answer, which no completion can match; leave such rows out of the data, or "
            "check data.answer_key"
        )
    stage = ["parsing the reference"]
    gold, same = _timed(_judge, text, completion, stage=stage, seconds=timeout_s)
    if not gold or _spelled_out(text, gold[0]):
        how = "parses to no answer" if not gold else f"reads as the product {gold[0]}"
        raise ValueError(
            f"math_verify: the reference {str(reference)[:120]!r} (read as {text[:120]!r}) "
            f"{how}, not a math answer; check data.answer_key, give answers as LaTeX "
            "($\\frac{\\pi}{2}$) or plain numbers, or score text answers with qa_em"
        )
    return 1.0 if same else 0.0


def _placeholder(text: str) -> bool:
    """Whether ``text`` (``gold_text``'s) is a placeholder for a missing answer."""
    inner = text.removeprefix("\\boxed{").removesuffix("}") if text.startswith("\\boxed{") else text
    bare = re.sub(r"\\(?:text|mathrm|textbf)\{([^{}]*)\}", r"\1", inner)
    return "".join(bare.replace("$", "").split()).lower() in MISSING_ANSWERS


def _spelled_out(text: str, gold: object) -> bool:
    """Whether math-verify read a word of a reference with no LaTeX of its own (boxed by
    ``gold_text``) as the product of its letters (two of them or more among the parse's
    symbols): prose, not math (module docstring)."""
    inner = text.removeprefix("\\boxed{").removesuffix("}")
    if inner == text or any(mark in inner for mark in _LATEX_MATH):
        return False
    symbols = {str(x).lower() for x in getattr(gold, "free_symbols", ())}
    return any(len(set(word.lower()) & symbols) >= 2 for word in _WORD.findall(inner))


def _judge(text: str, completion: str, *, stage: list[str]) -> tuple[list[Any], bool]:
    """math-verify's parse of both and its verify, alarms off; ``stage[0]`` says which
    step runs (for the timeout's message)."""
    from math_verify import parse, verify

    gold = parse(text, parsing_timeout=None)  # type: ignore[arg-type]
    if not gold:
        return gold, False
    stage[0] = "parsing the completion"
    answer = parse(completion, parsing_timeout=None)  # type: ignore[arg-type]
    stage[0] = "comparing"
    return gold, verify(gold, answer, timeout_seconds=None)


def gold_text(reference: object) -> str:
    """The reference as math-verify parses it: after the last ``####``, and in
    ``\\boxed{}`` unless it holds LaTeX math already (module docstring)."""
    text = str(reference)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    text = text.strip()
    if any(mark in text for mark in _LATEX_MATH):
        return text
    return f"\\boxed{{{text}}}"


def _timed(fn: Callable[..., Any], *args: object, seconds: float, stage: list[str]) -> Any:
    """``fn(*args, stage=stage)`` with math-verify's ``TimeoutException`` raised in this
    thread after ``seconds``; ``TimeoutError`` if it rang (whether math-verify caught it
    or not), naming ``stage[0]``, the step ``fn`` was in."""
    from math_verify.errors import TimeoutException

    alarm = _Alarm(seconds, TimeoutException)
    value = None
    try:
        alarm.start()
        value = fn(*args, stage=stage)
        alarm.stop()
    except TimeoutException:
        alarm.stop()  # it landed outside math-verify's handlers, or in the first stop()
    if alarm.rang:
        raise TimeoutError(
            f"math_verify: {stage[0]} ran past the call's {seconds:g} s budget; the sample "
            "fails instead of scoring 0 (reward.on_error)"
        )
    return value


class _Alarm:
    """Raises ``exception`` in the thread that started it once ``seconds`` pass, and again
    every ``AGAIN_S`` (at most ``RINGS`` times: C code that clears errors, such as a dict
    lookup calling ``__eq__``, can swallow one) until it stops; ``rang`` says whether it
    did. ``stop()`` ends the ringing before anything else (one attribute store, where no
    exception can land) and takes back a ring not yet raised, so none lands after it."""

    AGAIN_S = 0.25
    RINGS = 20

    def __init__(self, seconds: float, exception: type[BaseException]) -> None:
        self._seconds, self._exception = seconds, exception
        self._lock = threading.Lock()
        self._stopped = False
        self._left = threading.Event()  # wakes the watcher early
        self.rang = False

    def start(self) -> None:
        self._thread = threading.get_ident()
        threading.Thread(target=self._watch, name="grouprl-math-verify-alarm", daemon=True).start()

    def _watch(self) -> None:
        if self._left.wait(self._seconds):
            return
        for _ in range(self.RINGS):
            with self._lock:
                if self._stopped:
                    return
                self.rang = True
                _raise_in(self._thread, self._exception)
            if self._left.wait(self.AGAIN_S):
                return

    def stop(self) -> None:
        self._stopped = True  # first: the watcher checks it under the lock before a ring
        with self._lock:  # a ring may land here: then it leaves stop(), already stopped
            if self.rang:
                _raise_in(self._thread, None)  # not raised yet: take it back
        self._left.set()


def _raise_in(thread: int, exception: type[BaseException] | None) -> None:
    """Raise ``exception`` in ``thread`` at its next bytecode (None: take back a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread), None if exception is None else ctypes.py_object(exception)
    )


def _not_timeout_warning(record: logging.LogRecord) -> bool:
    """Drops math-verify's warning that its timeout is off: this module times the calls."""
    return not record.getMessage().startswith("Timeout is disabled")


def _quiet_timeout_warnings() -> None:
    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if _not_timeout_warning not in logger.filters:
            logger.addFilter(_not_timeout_warning)
