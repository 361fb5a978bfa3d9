"""Library comments and docstrings say what the code does and why (STYLE.md): no dates, issue numbers, machine
anecdotes, timings, results-file citations or "former" behaviour. Figures live in `benchmarks/results/`, history in
commit messages and `CHANGELOG.md`. Only comments and docstrings are read: a message printed to the user may well
speak of "this machine"."""

import ast
import io
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBRARY = ("agents", "envs", "systems", "launch", "analysis")
NOT_SAID_IN_LIBRARY_TEXT = {
    "a date": r"\b20\d\d-[01]\d-[0-3]\d\b",
    "an issue number": r"\bissues? #?\d+|#\d{2,}\b",
    "former behaviour": r"\bformer(ly)?\b|\bused to\b|\buntil (recently|now)\b|\bwas changed\b",
    "a machine anecdote": (r"\bon (2|two) (CPU )?cores\b|\b\d+-core (VM|machine|box)\b|\bmy machine\b"
                           r"|\bchecked on this machine\b"),
    "a timing": r"\b\d+(\.\d+)? ?(ms|us|µs)\b|\b\d+\.\d+ ?s\b|\bpeak(ed)? (at|of) \d",
    "a results-file citation": r"benchmarks/results|results/\w+\.md|\bmeasured here\b",
}
_PATTERN = re.compile("|".join(f"(?P<p{i}>{p})" for i, p in enumerate(NOT_SAID_IN_LIBRARY_TEXT.values())),
                      re.IGNORECASE)
_NAMES = list(NOT_SAID_IN_LIBRARY_TEXT)


def library_text(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring line of `source`."""
    lines = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                lines += [(first.lineno + i, text) for i, text in enumerate(first.value.value.splitlines())]
    return lines


def findings(source: str) -> list[tuple[int, str, str]]:
    """(line, what, the words) for each thing library text must not say."""
    found = []
    for line, text in library_text(source):
        for match in _PATTERN.finditer(text):
            found.append((line, _NAMES[int(match.lastgroup[1:])], match.group(0)))
    return found


@pytest.mark.parametrize("package", LIBRARY)
def test_library_comments_and_docstrings_say_what_and_why(package):
    offending = [f"{path.relative_to(ROOT)}:{line}: {what} ({words!r})"
                 for path in sorted((ROOT / package).rglob("*.py"))
                 for line, what, words in findings(path.read_text())]
    assert not offending, "\n".join(offending)


@pytest.mark.parametrize("source, what", [
    ("x = 1  # measured 2026-11-27\n", "a date"),
    ('def f():\n    """Was slower before; see issue 63."""\n', "an issue number"),
    ("# the former lock\n", "former behaviour"),
    ('"""Built in 14 s on 2 cores."""\n', "a machine anecdote"),
    ("# about 12.8 ms a step\n", "a timing"),
    ("# see benchmarks/results/cnn_cpu.md\n", "a results-file citation"),
])
def test_the_style_check_sees_each_kind(source, what):
    assert what in [found for _, found, _ in findings(source)]


def test_the_style_check_reads_no_string_but_docstrings():
    source = 'def f():\n    """Steps the envs."""\n    raise ValueError("more than this machine holds, 12.5 ms")\n'
    assert findings(source) == []


def test_the_training_launchers_hold_no_preset_value():
    """A launcher reads flags and presets; every default number lives in `systems/common/presets.py`,
    `systems/offpolicy/presets.py` or a config field (0, 1 and -1 are counts and sentinels, not presets)."""
    from systems.registry import LAUNCHERS

    offending = []
    for launcher in LAUNCHERS:
        path = ROOT / "launch" / f"{launcher}.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and type(node.value) in (int, float)
                    and node.value not in (0, 1, -1)):
                offending.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not offending, offending
