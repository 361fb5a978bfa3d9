"""The import map of WORKSPACE.md: the shared floors (`systems.common`, `systems.replay`, `systems.offpolicy`,
`agents`, `envs`) import no system package, no system imports another, and nothing in `systems`, `agents` or `envs`
imports the tools above them (`analysis`, `launch`, `benchmarks`); only `systems.registry` and the launchers list
the systems."""

import ast
import pathlib
import subprocess
import sys

import pytest

from systems.registry import ENTRIES

ROOT = pathlib.Path(__file__).resolve().parents[1]
SYSTEMS = tuple(ENTRIES)  # systems.registry: the one list of systems
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


def test_the_registry_is_the_list_the_launchers_and_their_flag_sets_follow():
    """Each registered system has its launcher module, whose flags are the groups its entry names (each one the
    flag set knows) with the entry's --algo choices, and its config class is the folder's."""
    import importlib

    from launch import flagsets

    for entry in ENTRIES.values():
        assert (ROOT / "launch" / f"{entry.launcher}.py").is_file()
        assert all(group in flagsets.GROUPS or group.startswith("fields:") for _, group in entry.flag_groups), entry
        launcher_flags = importlib.import_module(f"launch.{entry.launcher}").FLAGS
        assert set(launcher_flags) == set(flagsets.flag_values(entry.launcher)), entry.name
        assert launcher_flags["algo"].parser.enum_values == list(entry.algos), entry.name
        assert entry.config_class().__module__ == f"systems.{entry.name}.config", entry.name


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


PACKAGES = ("agents", "envs", "systems", "launch", "analysis")


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """Our modules and the modules of ours each imports, at any depth; `from pkg import mod` counts as `pkg.mod`
    where that is a module, else as `pkg`."""
    modules = {_module_name(path, root): path for package in PACKAGES for path in (root / package).rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for module in _imports(path):
            while module and module not in modules:
                module = module.rpartition(".")[0]
            if module and module != name:
                targets.add(module)
        graph[name] = targets
    return graph


def _a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (its modules in order, the first repeated at the end), or [] when it has none.
    A package's `__init__` importing its own submodules is not a cycle of interest (Python runs it first)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if node.startswith(target + "."):  # a module importing its own package's __init__
                continue
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_import_cycle():
    """No module of ours reaches itself through its imports, lazy ones inside functions included."""
    assert _a_cycle(_import_graph()) == []


def test_the_cycle_check_sees_a_lazy_cycle(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "systems" / "a.py").write_text("from systems import b\n")
    (tmp_path / "systems" / "b.py").write_text("def f():\n    import systems.a\n")
    assert _a_cycle(_import_graph(tmp_path)) == ["systems.a", "systems.b", "systems.a"]


@pytest.mark.parametrize("package, other", [("agents", "envs"), ("envs", "agents")])
def test_agents_and_envs_do_not_import_each_other(package, other):
    offending = {
        f"{path.relative_to(ROOT)} imports {module}"
        for path in (ROOT / package).rglob("*.py") for module in _imports(path) if module.split(".")[0] == other
    }
    assert not offending, sorted(offending)


_IMPORT_CHANGES_NOTHING = """
import importlib.util, os, sys
import envpool, gymnasium, jax, matplotlib  # third-party modules set variables of their own (pygame's prompt)
if importlib.util.find_spec("pygame"):
    import pygame
before = dict(os.environ)
backend_choices = []
matplotlib.use = lambda *args, **kwargs: backend_choices.append(args)
import launch.hts, launch.sync, launch.pal, launch.gala, launch.ba3c, launch.spreeze, launch.anakin, launch.sweep
import launch.evaluate, launch.report, analysis.plots, analysis.aggregate
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
print(changed, backend_choices)
"""


def test_importing_our_modules_changes_no_environment_variable_and_picks_no_plot_backend():
    """XLA's flags are the launcher entry's to set (`launch.common.launch`), a plot backend the plotting call's."""
    out = subprocess.run([sys.executable, "-c", _IMPORT_CHANGES_NOTHING], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout.strip()
    assert out == "[] []", out
