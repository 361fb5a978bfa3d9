"""The import map of WORKSPACE.md: the shared floors (`systems.common`, `systems.replay`, `systems.offpolicy`,
`agents`, `envs`) import no system package, no system imports another, and nothing in `systems`, `agents` or `envs`
imports the tools above them (`analysis`, `launch`, `benchmarks`); only `systems.registry` and the launchers list
the systems."""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SYSTEMS = ("hts", "sync", "ba3c", "gala", "pal", "spreeze", "anakin")
FLOORS = ("systems/common", "systems/replay", "systems/offpolicy", "agents", "envs")
TOOLS = ("analysis", "launch", "benchmarks")  # above every system: nothing in systems/, agents/ or envs/ imports them


def _imports(path: pathlib.Path) -> set[str]:
    """Every module `path` imports, at any depth (lazy imports inside functions included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _system_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "systems" and parts[1] in SYSTEMS else None


@pytest.mark.parametrize("floor", FLOORS)
def test_shared_floors_import_no_system(floor):
    offending = {
        f"{path.relative_to(ROOT)} imports {module}"
        for path in (ROOT / floor).rglob("*.py") for module in _imports(path) if _system_of(module)
    }
    assert not offending, sorted(offending)


@pytest.mark.parametrize("system", SYSTEMS)
def test_no_system_imports_another(system):
    offending = {
        f"{path.relative_to(ROOT)} imports {module}"
        for path in (ROOT / "systems" / system).rglob("*.py") for module in _imports(path)
        if _system_of(module) not in (None, system)
    }
    assert not offending, sorted(offending)


@pytest.mark.parametrize("package", ["systems", "agents", "envs"])
def test_systems_agents_and_envs_import_no_tool(package):
    offending = {
        f"{path.relative_to(ROOT)} imports {module}"
        for path in (ROOT / package).rglob("*.py") for module in _imports(path) if module.split(".")[0] in TOOLS
    }
    assert not offending, sorted(offending)


def test_every_system_folder_is_listed():
    folders = {p.name for p in (ROOT / "systems").iterdir() if (p / "system.py").is_file()}
    assert folders == set(SYSTEMS)


def test_the_test_sees_a_back_import(tmp_path):
    """The check itself: a lazy import of a system inside a function is found."""
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from systems.pal.system import PALConfig\n")
    assert _system_of(sorted(_imports(path))[0]) == "pal"


_LAUNCHERS_THEN_GAE = """
import sys
import launch.hts, launch.pal, launch.sync
heavy = lambda: sorted({m.split(".")[0] for m in sys.modules} & {"rlax", "distrax", "tensorflow_probability"})
print(heavy())
import jax.numpy as jnp
from agents.gae import gae_advantages
gae_advantages(jnp.zeros((3, 2)), jnp.zeros((3, 2)), jnp.zeros(2), jnp.zeros((3, 2)), jnp.zeros((3, 2)), gamma=0.9,
               gae_lambda=0.9)
print(heavy())
"""


def test_launchers_import_rlax_only_when_an_update_needs_it():
    """rlax pulls in distrax and TensorFlow Probability (about a second per process): `--help`, a refused flag and
    SAC / TD3 runs never need it; GAE and DQN import it where they use it."""
    out = subprocess.run([sys.executable, "-c", _LAUNCHERS_THEN_GAE], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout.splitlines()
    assert out[0] == "[]", out
    assert "rlax" in out[1], out
