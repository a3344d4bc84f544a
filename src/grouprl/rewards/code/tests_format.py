"""A problem's tests, from the common dataset formats into one form (``ProblemTests``).

Where the tests are: the row's ``data.answer_key`` value (``reference``) when it holds
tests, else the first of these row fields present (their datasets named beside them):

=========================  ==============================================================
``input_output``           APPS, TACO, PRIME's code data (verl's ``prime_code``): JSON
                           ``{"inputs": [...], "outputs": [...], "fn_name": optional}``
``public_test_cases``,     LiveCodeBench (``lcb_runner/benchmarks/code_generation.py``):
``private_test_cases``     JSON lists of ``{"input", "output", "testtype": "stdin" |
                           "functional"}``; private ones in code_generation_lite are
                           base64(zlib(pickle(JSON text))); ``metadata`` JSON has
                           ``func_name`` for functional ones
``verification_info``      open-r1 (``src/open_r1/rewards.py``): ``{"language":
                           "python", "test_cases": [{"input", "output", "type":
                           "stdin_stdout"}]}``
``tests``                  DeepCoder/rLLM: a list (or its JSON) of ``{"input", "output",
                           "testtype" or "type"}``, or an ``input_output``-shaped dict
``test``, ``test_code``    KodCode (``test_code``, ``test_entry_point`` in its SFT set):
                           pytest code that does ``from solution import f``
``test_list``              MBPP: a list of ``assert`` lines (``test_setup_code`` first);
                           ``assert f(<literals>) == <literal>`` lines without setup are
                           function calls (``assert_calls.py``: they cannot be forged)
=========================  ==============================================================

Three kinds of test come out: ``stdio`` (the program reads the case's input on stdin; its
whole stdout must equal the expected output), ``call`` (``fn_name(*args)`` must return the
expected value; LiveCodeBench and PRIME write the arguments as JSON lines and the output as
JSON, APPS as a list of arguments and a value in a one-element list) and ``assert`` (the
test functions, ``test_*``, or the plain asserts as one test, must not raise).
"""

from __future__ import annotations

import ast
import base64
import io
import json
import pickle
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from grouprl.rewards.code.assert_calls import as_call_tests

Kind = Literal["stdio", "call", "assert"]

ROW_FIELDS = (
    "input_output",
    "public_test_cases",
    "verification_info",
    "tests",
    "test",
    "test_code",
    "test_list",
)
"""Row fields the tests are looked for in, in this order (module docstring)."""


class TestsError(ValueError):
    """A row whose tests cannot be read: a reward failure of its sample (never a 0)."""

    __test__ = False  # not a pytest class
    user_error = True


@dataclass(frozen=True)
class ProblemTests:
    """A problem's tests in one form. ``cases``: stdio ``{"stdin", "expected"}``; call
    ``{"args", "expected", "wrapped"}`` (and ``"strict"``: the returned value must be of
    JSON's plain types, for assert lines turned into calls); assert: the test functions'
    names."""

    __test__ = False  # not a pytest class

    kind: Kind
    cases: tuple[Any, ...]
    fn_name: str | None = None
    test_code: str = ""
    """assert: the test module (``from solution import *`` first)."""


def load_tests(reference: object, row: dict[str, Any]) -> ProblemTests:
    """The tests of ``row``: from ``reference`` when it holds some, else from the row's
    fields (module docstring). Raises ``TestsError`` saying what was found instead."""
    if reference is not None:
        # LiveCodeBench's public cases as the reference: its private ones count too
        lcb = "public_test_cases" if reference == row.get("public_test_cases") else ""
        tests = _readable(reference, row, where="the reference (data.answer_key)", key=lcb)
        if tests is not None:
            return tests
    for key in ROW_FIELDS:
        if row.get(key) not in (None, "", []):
            tests = _readable(row[key], row, where=f"row field {key!r}", key=key)
            if tests is not None:
                return tests
    raise TestsError(
        f"row {row.get('_index')}: no tests found: data.answer_key gave "
        f"{_short(reference)} and the row has none of the fields {list(ROW_FIELDS)}. Fix: "
        "point data.answer_key at the tests, or give the rows one of those fields "
        "(docs/code.md lists the formats)"
    )


def _readable(
    value: object, row: dict[str, Any], *, where: str, key: str = ""
) -> ProblemTests | None:
    """``_parse``, its every failure on malformed data a ``TestsError`` naming the row and
    where its tests were read (a bare ``KeyError: 'input'`` would name neither)."""
    try:
        if key == "public_test_cases":  # with private_test_cases and metadata
            return livecodebench(row, where=where)
        return _parse(value, row, where=where)
    except TestsError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, zlib.error, pickle.UnpicklingError) as err:
        raise TestsError(
            f"row {row.get('_index')}: {where} is not a test format code_tests reads "
            f"({type(err).__name__}: {err}). Fix the row, or see docs/code.md for the formats"
        ) from err


def _parse(value: object, row: dict[str, Any], *, where: str) -> ProblemTests | None:
    """``value``'s tests, or None when it holds none (a plain answer)."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "["):
            try:
                value = json.loads(text)
            except ValueError as err:
                raise TestsError(f"{where}: not valid JSON ({err}): {_short(text)}") from None
        elif _is_test_code(text):
            return assert_tests(text, entry_point=row.get("entry_point"), where=where)
        else:
            return None
    if isinstance(value, dict):
        return _from_dict(value, row, where=where)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if not all(v.lstrip().startswith("assert") for v in value):
            return None
        return mbpp_tests(value, setup=row.get("test_setup_code") or "")
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return case_list(value, fn_name=_func_name(row), where=where)
    return None


def _from_dict(value: dict, row: dict[str, Any], *, where: str) -> ProblemTests | None:
    if "inputs" in value and "outputs" in value:
        return input_output(value, where=where)
    if "test_cases" in value:  # open-r1's verification_info
        cases = value["test_cases"]
        if isinstance(cases, str):
            cases = json.loads(cases)
        if isinstance(cases, dict):  # PRIME's verification_info: an input_output dict
            return input_output({"fn_name": value.get("fn_name"), **cases}, where=where)
        language = value.get("language", "python")
        if language not in ("python", "python3"):
            raise TestsError(f"{where}: language {language!r}; code_tests runs Python only")
        return case_list(cases, fn_name=value.get("fn_name") or _func_name(row), where=where)
    if "public_test_cases" in value or "private_test_cases" in value:
        return livecodebench(value, where=where)
    return None


def input_output(value: dict, *, where: str) -> ProblemTests:
    """APPS/TACO/PRIME ``{"inputs", "outputs", "fn_name"}``, as ``case_list`` reads them."""
    inputs, outputs, fn_name = value["inputs"], value["outputs"], value.get("fn_name")
    if len(inputs) != len(outputs) or not inputs:
        raise TestsError(f"{where}: {len(inputs)} inputs for {len(outputs)} outputs")
    kind = "functional" if fn_name else "stdin"
    cases = [{"input": i, "output": o, "type": kind} for i, o in zip(inputs, outputs, strict=True)]
    return case_list(cases, fn_name=fn_name, where=where)


def _call_case(args: str | Sequence[object], expected: object) -> dict[str, Any]:
    """LiveCodeBench/PRIME write the arguments as JSON lines and the value as JSON text;
    APPS a list of arguments and the value in a one-element list (``wrapped``)."""
    if isinstance(args, str):
        return {
            "args": [json.loads(line) for line in args.split("\n") if line.strip()],
            "expected": json.loads(expected) if isinstance(expected, str) else expected,
            "wrapped": False,
        }
    return {"args": list(args), "expected": expected, "wrapped": True}


def case_list(cases: list[dict], *, fn_name: str | None, where: str) -> ProblemTests:
    """``[{"input", "output", "testtype"|"type"}]``: stdin/stdout, or function calls."""
    types = {str(c.get("testtype", c.get("type", "stdin"))) for c in cases}
    functional = types & {"functional", "function_call"}
    if functional and len(types) > 1:
        raise TestsError(f"{where}: mixes test types {sorted(types)}; one kind per problem")
    if not cases:
        raise TestsError(f"{where}: an empty list of test cases")
    if functional:
        fn_name = fn_name or _func_name(cases[0])  # DeepCoder keeps the name in each case
        if not fn_name:
            raise TestsError(
                f"{where}: functional tests without a function name; give the row "
                "metadata.func_name (LiveCodeBench) or fn_name, or each case (DeepCoder)"
            )
        calls = tuple(_call_case(c["input"], c["output"]) for c in cases)
        return ProblemTests("call", calls, fn_name)
    return ProblemTests(
        "stdio", tuple({"stdin": _text(c["input"]), "expected": _text(c["output"])} for c in cases)
    )


def livecodebench(row: dict[str, Any], *, where: str) -> ProblemTests:
    """LiveCodeBench's public and private cases together; private ones may be compressed."""
    cases: list[dict] = []
    for key in ("public_test_cases", "private_test_cases"):
        value = row.get(key)
        if isinstance(value, str):
            value = _lcb_decode(value) if value.strip() else []
        cases.extend(value or [])
    return case_list(cases, fn_name=_func_name(row), where=where)


class _TextOnly(pickle.Unpickler):
    """Unpickles plain data only: LiveCodeBench's payload is a str. Any class or function
    reference (what makes pickle run code) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: only plain data is read")


def _lcb_decode(text: str) -> list[dict]:
    """JSON text, or code_generation_lite's base64(zlib(pickle(JSON text)))."""
    if text.lstrip()[:1] == "[":
        return json.loads(text)
    raw = zlib.decompress(base64.b64decode(text.encode()))
    payload = _TextOnly(io.BytesIO(raw)).load()
    return json.loads(payload) if isinstance(payload, str | bytes) else payload


def _func_name(row: dict[str, Any]) -> str | None:
    metadata = row.get("metadata")
    if isinstance(metadata, str) and metadata.strip().startswith("{"):
        metadata = json.loads(metadata)
    if isinstance(metadata, dict) and metadata.get("func_name"):
        return metadata["func_name"]
    return row.get("fn_name") or row.get("test_entry_point") or None


def _is_test_code(text: str) -> bool:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.Assert) for node in ast.walk(tree))


def assert_tests(code: str, *, entry_point: str | None = None, where: str = "") -> ProblemTests:
    """Test code: each ``test*`` function, and method of a ``Test*`` class, is a test (all its
    ``@pytest.mark.parametrize`` sets must pass); HumanEval's ``check(candidate)`` is one
    test called with the row's ``entry_point``; else the top-level asserts are one test."""
    tree = ast.parse(code)
    functions = {
        node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    names = _test_names(tree)
    if names:
        return ProblemTests("assert", tuple(names), test_code=f"from solution import *\n{code}")
    if "check" in functions and entry_point:
        call = f"\n\ndef test_check():\n    check({entry_point})\n"
        return ProblemTests(
            "assert", ("test_check",), test_code=f"from solution import *\n{code}{call}"
        )
    lines = [ast.unparse(node) for node in tree.body]
    calls = as_call_tests(lines) if all(isinstance(n, ast.Assert) for n in tree.body) else None
    if calls is not None:  # plain ``assert f(1) == 2`` lines: function calls (mbpp_tests)
        return ProblemTests("call", calls[1], calls[0])
    if not any(isinstance(node, ast.Assert) for node in tree.body):
        raise TestsError(
            f"{where}: its asserts are inside functions that no test calls (no test_* "
            f"function; functions {sorted(functions)}): such tests would pass anything. "
            "Fix: name the test functions test_*, or give the row entry_point for "
            "HumanEval's check(candidate)"
        )
    body = "\n".join("    " + line for line in code.splitlines())
    wrapped = f"from solution import *\n\ndef test_asserts():\n{body}\n"
    return ProblemTests("assert", ("test_asserts",), test_code=wrapped)


def _test_names(tree: ast.Module) -> list[str]:
    """pytest's names, in source order: top-level ``test*`` functions and the ``test*``
    methods of top-level ``Test*`` classes (as ``TestCls.test_x``)."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names += [
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                and item.name.startswith("test")
            ]
    return names


def mbpp_tests(asserts: list[str], *, setup: str) -> ProblemTests:
    """MBPP's ``test_list``: each assert one test, after ``test_setup_code``. Where every
    line is ``assert f(<literals>) == <literal>`` and there is no setup, the lines are
    function-call tests instead (``assert_calls``: judged outside the program's process,
    so they cannot be forged; the verdict stays ``==``'s)."""
    calls = None if setup.strip() else as_call_tests(asserts)
    if calls is not None:
        return ProblemTests("call", calls[1], calls[0])
    functions = "".join(
        f"\ndef test_{i}():\n    {line.strip()}\n" for i, line in enumerate(asserts)
    )
    code = f"from solution import *\n{setup}\n{functions}"
    return ProblemTests("assert", tuple(f"test_{i}" for i in range(len(asserts))), test_code=code)


def _text(value: object) -> str:
    """A stdin or expected output: APPS sometimes stores one as a list of lines."""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return str(value)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
