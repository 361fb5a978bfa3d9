"""The front door stays true: the README is a front page whose test command is `.ci/run`'s, the generated docs pages
are what `python -m launch.docs` generates, and every `python -m launch.<name> ...` command in the README and in
docs/ parses with that launcher's own flags (env ids and presets included, as `launch.sweep` checks a grid)."""

import glob
import os
import re
import shlex
from concurrent.futures import ThreadPoolExecutor

import pytest

from launch import docs
from launch.sweep import probe_launcher
from systems.registry import ENTRIES
from tests.fixtures import REPO_ROOT

_COMMAND = re.compile(r"python -m launch\.(\w+)([^`\n]*)")
_PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|=([A-Z][A-Z_:]*|DIR|N|I)$")
_SHELL_END = ("&&", "||", "|", ";", ">", "2>")
LAUNCHERS = {entry.launcher for entry in ENTRIES.values()}
# Examples of the docs that need a package the test extra leaves out: their commands are not parsed here.
OPTIONAL_PACKAGE_EXAMPLES = {"--env=jax/craftax_classic:make": "craftax"}


def _read(path):
    with open(os.path.join(REPO_ROOT, path)) as f:
        return f.read()


def _documents() -> list[str]:
    pages = sorted(glob.glob("docs/**/*.md", root_dir=REPO_ROOT, recursive=True))
    return ["README.md", *(p for p in pages if not p.startswith(("docs/results/", "docs/reference/")))]


def commands(text: str) -> list[tuple[str, list[str]]]:
    """(launcher, args) of each training launcher's command line in `text` (shell words up to `&&`, a pipe, a
    redirection or a comment); a mention without flags, `--help` and lines with placeholders are skipped."""
    found = []
    for match in _COMMAND.finditer(text):
        launcher = match.group(1)
        try:
            words = shlex.split(match.group(2), comments=True)
        except ValueError:  # an unbalanced quote: prose around the command
            continue
        args = []
        for word in words:
            if word in _SHELL_END:
                break
            args.append(word)
        if (launcher in LAUNCHERS and args and "--help" not in args and all(a.startswith("--") for a in args)
                and not any(_PLACEHOLDER.search(a) for a in args)):
            found.append((launcher, args))
    return found


def test_commands_finds_a_launchers_flags_and_skips_placeholders():
    text = ("    python -m launch.hts --game=Breakout --num_envs=16 && python -m pytest\n"
            "`python -m launch.ba3c --num_processes=N --process_id=I` and `python -m launch.sweep --sweep=x`\n"
            "$ python -m launch.pal --env=LunarLander-v2   # a comment --not_a_flag\n"
            "$ python -m launch.sync --env=CartPole-v1 --env_kwargs='{\"a\": 1}'\n"
            "`python -m launch.hts` alone, and `python -m launch.hts --help`\n")
    assert commands(text) == [("hts", ["--game=Breakout", "--num_envs=16"]), ("pal", ["--env=LunarLander-v2"]),
                              ("sync", ["--env=CartPole-v1", '--env_kwargs={"a": 1}'])]


def test_readme_is_a_front_page_whose_test_command_is_ci():
    readme = _read("README.md").splitlines()
    assert len(readme) <= 200
    blocks = [line.strip() for line in readme if line.startswith("    python -m pip install")]
    assert blocks[0] == "python -m pip install -e . && python -m launch.hts --game=Breakout"
    ci = [line for line in _read(".ci/run").splitlines() if line.startswith("python -m pip")]
    assert blocks[1] == ci[0], "the README's test command and .ci/run differ"
    assert "mkdocs build --strict" in ci[0]


def test_generated_pages_are_current():
    assert docs.stale() == [], "run `python -m launch.docs` and commit the pages"


def test_a_stale_page_is_named(tmp_path):
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "docs" / "reference" / "hts.md").write_text("old")
    (tmp_path / "docs" / "reference" / "gone.md").write_text("a launcher that was removed")
    stale = docs.stale(str(tmp_path))
    assert "docs/reference/hts.md" in stale and "docs/reference/gone.md" in stale
    assert "docs/reference/sync.md" in stale  # missing


def test_every_launcher_has_a_system_page_and_a_reference_page():
    for launcher in LAUNCHERS:
        assert os.path.exists(os.path.join(REPO_ROOT, "docs", "systems", f"{launcher}.md")), launcher
        assert os.path.exists(os.path.join(REPO_ROOT, "docs", "reference", f"{launcher}.md")), launcher


def _write_the_guides_env_module(folder) -> None:
    """The own-env guide's first Python block is its `my_robot.py`: the commands that name it import it."""
    guide = _read("docs/guides/own-env.md")
    code = guide.split("```python\n", 1)[1].split("```", 1)[0]
    (folder / "my_robot.py").write_text(code)


@pytest.mark.slow
def test_every_command_in_the_readme_and_docs_parses(tmp_path, monkeypatch):
    _write_the_guides_env_module(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), REPO_ROOT]))
    import importlib.util

    by_launcher: dict[str, list[tuple[str, list[str]]]] = {}
    for path in _documents():
        for launcher, args in commands(_read(path)):
            needs = [OPTIONAL_PACKAGE_EXAMPLES[a] for a in args if a in OPTIONAL_PACKAGE_EXAMPLES]
            if any(importlib.util.find_spec(package) is None for package in needs):
                continue
            by_launcher.setdefault(launcher, []).append((path, args))
    assert {"hts", "anakin", "pal"} <= set(by_launcher)

    def probe(launcher):
        return launcher, probe_launcher(launcher, [args for _, args in by_launcher[launcher]])["errors"]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(probe, sorted(by_launcher)))
    failures = [f"{path}: python -m launch.{launcher} {' '.join(args)}: {error}"
                for launcher, errors in results
                for (path, args), error in zip(by_launcher[launcher], errors, strict=True) if error]
    assert not failures, "\n".join(failures)
