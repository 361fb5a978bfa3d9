"""`python -m launch.sweep --system=hts --env=CartPole-v1 --sweep=num_actors=1,4,8,16 --seeds=0,1,2`: run one
launcher over a grid of flag values and seeds (the papers' sweeps, e.g. HTS-RL's number of actors and
synchronization interval alpha, seed 000 section 5; the grid format and run layout: `analysis/grid.py`).

* `--system`: the launcher, `python -m launch.<system>` (hts, sync, ba3c, gala, pal, spreeze).
* `--sweep=NAME=V1,V2,...`: any flag of that launcher; repeat it for a grid (the cartesian product, the last one
  varying fastest; seeds are the outermost loop). Values are split on ';' instead when there is one, for list flags:
  `--sweep='hidden_sizes=64,64;256,256'`. `--seeds=0,1,2` gives each point's `--seed` (seed is never swept).
* Every flag the sweep does not define (`--env=CartPole-v1 --total_steps=4096 --eval_episodes=2`, absl's own
  `--verbosity`, ...) is passed unchanged, in order, to every run: `parse_flags` splits the command line before absl
  sees it, and the sweep's flags live in their own `FlagValues` (`SWEEP_FLAGS`), so no launcher flag can collide
  with them in `flags.FLAGS`.
* Run `i`: `python -m launch.<system> <passed flags> --<name>=<value> ... --seed=<s> --logdir=<sweep_dir>/<run name>`
  with its stdout and stderr appended to `<run dir>/launch.log`, one run after another or `--parallel=N` at a time.
  `--sweep_dir` defaults to `runs/sweep-<system>-<env>-<time>`; `--dry_run` prints the planned commands.
* Resumable: rerunning the same command with the same `--sweep_dir` skips runs whose summary.json says
  `"interrupted": false`, continues runs that have a checkpoint with `--resume` (every launcher takes it) and
  restarts the others from scratch (their directory is emptied, launch.log kept). The manifest
  `<sweep_dir>/sweep.json` (written atomically) records the system, grid, seeds, passed flags and each run's
  command, status and exit code. A rerun must use the same system, passed flags and swept flag names; it may add
  values and seeds (never drop them), so a finished sweep can be extended in place. When every run is finished no
  child is started at all (not even the flag check below). `<sweep_dir>/sweep.lock` keeps two sweeps out of one
  directory.
* Checked before anything starts (one `error: ...` line, exit 2): malformed or repeated `--sweep`, sweeping or
  passing `--seed`, `--logdir` or `--resume`, a flag both swept and passed, and, in a child process that parses
  every planned command line with the launcher's own flags and builds its config (`probe_main`: no training, nothing
  written), unknown flag names, bad values, stray arguments and settings the launcher rejects.
* A failed run does not stop the others; the exit code is 1 if any failed. Ctrl-C (or SIGTERM) sends SIGINT to each
  running child's process group (the launchers then write a checkpoint and a summary marked interrupted), waits up to
  `STOP_TIMEOUT_S`, kills what is left (at once on a second Ctrl-C) and exits 130; the rerun resumes them.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import NoReturn

from absl import app, flags

from analysis import grid as grid_lib
from systems.common import rundir
from systems.common.outputs import format_duration, write_json_atomic
from systems.registry import LAUNCHERS

SYSTEMS = LAUNCHERS  # hts, sync, ba3c, gala, pal, spreeze
SWEEP_FLAGS = flags.FlagValues()  # the sweep's own flags; flags.FLAGS keeps only absl's (see the module docstring)

_SYSTEM = flags.DEFINE_enum(
    "system", None, list(SYSTEMS), "Launcher to sweep: python -m launch.<system>.", flag_values=SWEEP_FLAGS
)
_SWEEP = flags.DEFINE_multi_string(
    "sweep", [], "NAME=V1,V2,...: values of one launcher flag; repeat for a grid (';' separates list values).",
    flag_values=SWEEP_FLAGS,
)
_SEEDS = flags.DEFINE_list("seeds", ["0"], "Seeds of every grid point (each run's --seed).", flag_values=SWEEP_FLAGS)
_SWEEP_DIR = flags.DEFINE_string(
    "sweep_dir", "", "Directory of the sweep's runs and sweep.json (default: runs/sweep-<system>-<env>-<time>); "
    "rerun a sweep with the same one to skip finished runs and resume interrupted ones.", flag_values=SWEEP_FLAGS,
)
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at the same time.", flag_values=SWEEP_FLAGS)
_DRY_RUN = flags.DEFINE_boolean(
    "dry_run", False, "Check the flags, print each run's planned command line and exit.", flag_values=SWEEP_FLAGS
)

STOP_TIMEOUT_S = 60.0  # after Ctrl-C: time for the runs to write their checkpoint and summary before they are killed
PROBE_TIMEOUT_S = 300.0
_POLL_S = 0.2
_HELP = ("-h", "-?", "--help", "-help", "--helpshort", "-helpshort", "--helpfull", "-helpfull")
_PROBE_MARK = "sweep-probe: "
SKIP, RESUME, START = "skip", "resume", "start"


# ---------------------------------------------------------------------------------------------------------------------
# Command lines (pure)


def flag_name(token: str) -> str | None:
    """`--name=value`, `-name`, `--noname` -> the name as written (`noname`); None for values, `-` and `--`."""
    if not token.startswith("-") or token in ("-", "--"):
        return None
    return token.lstrip("-").partition("=")[0]


def split_argv(args: list[str], own: dict[str, bool] | None = None) -> tuple[list[str], list[str]]:
    """Splits command-line arguments (without the program name) into the sweep's flags and the flags passed to every
    run, both in their order. `own` maps the sweep's flag names to whether they are boolean (default: SWEEP_FLAGS).
    A non-boolean sweep flag given as `--name value` takes the next token; everything after `--` is passed on."""
    if own is None:
        own = {name: SWEEP_FLAGS[name].boolean for name in SWEEP_FLAGS}
    mine, passed = [], []
    i = 0
    while i < len(args):
        token, name = args[i], flag_name(args[i])
        if token == "--":
            passed.extend(args[i:])
            break
        if name in own:
            mine.append(token)
            if "=" not in token and not own[name] and i + 1 < len(args):
                mine.append(args[i + 1])
                i += 1
        elif name is not None and name.startswith("no") and own.get(name[2:]) is True:
            mine.append(token)
        else:
            passed.append(token)
        i += 1
    return mine, passed


def passthrough_value(passthrough: list[str], name: str) -> str | None:
    """The last value given to `--name` (`--name=v` or `--name v`) among the passed flags, or None."""
    value = None
    for i, token in enumerate(passthrough):
        if flag_name(token) != name:
            continue
        if "=" in token:
            value = token.partition("=")[2]
        elif i + 1 < len(passthrough) and flag_name(passthrough[i + 1]) is None:
            value = passthrough[i + 1]
    return value


def check_passthrough(passthrough: list[str], grid: grid_lib.Grid) -> None:
    """Raises ValueError for a passed flag that the sweep sets (--seed, --logdir, --resume) or that is also swept."""
    swept = {name for name, _ in grid}
    for token in passthrough:
        name = flag_name(token)
        if name is None:
            continue
        base = name[2:] if name.startswith("no") and name[2:] in (*grid_lib.RESERVED, *swept) else name
        if base in grid_lib.RESERVED:
            raise ValueError(f"{token}: --{base} is set by the sweep for each run ({grid_lib.RESERVED[base]})")
        if base in swept:
            raise ValueError(f"{token}: --{base} is both swept and passed to every run")


def run_args(passthrough: list[str], run: grid_lib.RunSpec, run_dir: str) -> list[str]:
    """The launcher's arguments for one run: passed flags, swept values, seed and run directory."""
    return [*passthrough, *(f"--{name}={value}" for name, value in run.flags), f"--seed={run.seed}",
            f"--logdir={run_dir}"]


def build_command(system: str, args: list[str], *, resume: bool, python: str = sys.executable) -> list[str]:
    return [python, "-m", f"launch.{system}", *args, *(["--resume"] if resume else [])]


def plan_action(state: str, *, supports_resume: bool) -> str:
    """What a (re)run does with a run directory in `state` (grid_lib.FINISHED / CHECKPOINTED / NEW)."""
    if state == grid_lib.FINISHED:
        return SKIP
    return RESUME if state == grid_lib.CHECKPOINTED and supports_resume else START


def default_sweep_dir(system: str, grid: grid_lib.Grid, passthrough: list[str], now: float | None = None) -> str:
    """runs/sweep-<system>-<env>-<time>; the env part is left out when the env is swept or not given."""
    swept = {name for name, _ in grid}
    env = None
    if not swept & {"env", "game"}:
        env = passthrough_value(passthrough, "env") or passthrough_value(passthrough, "game")
    parts = ["sweep", system, *([env.replace("/", "_")] if env else []),
             time.strftime("%Y%m%d-%H%M%S", time.localtime(now))]
    return os.path.join("runs", "-".join(parts))


def check_against_launcher(system: str, grid: grid_lib.Grid, named_args: list[tuple[str, list[str]]], probe: dict):
    """Raises ValueError for a swept name the launcher does not define, or the first planned command line (name,
    args) its flags reject. `probe` is `probe_launcher`'s answer."""
    known = probe["flags"]
    for name, _ in grid:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean --{close[0]}?)" if close else ""
            raise ValueError(f"--sweep: launch.{system} has no flag --{name}{hint}")
    for (name, _), error in zip(named_args, probe["errors"], strict=True):
        if error:
            raise ValueError(f"launch.{system} rejects the flags of run {name}: {' '.join(error.split())}")


# ---------------------------------------------------------------------------------------------------------------------
# The launcher's flags, read in a child process


def probe_main() -> None:
    """In a child: imports launch.<system> (which defines its flags in its own `FLAGS`; nothing runs) and checks
    each command line of the JSON request on stdin as the launcher would before training: its flags parse it
    (absl's own flags such as --verbosity included), then the launcher's `make_config()` builds and validates the
    config. Prints the flag names, `--resume` support and one error (or null) per command line."""
    from launch import cli

    request = json.loads(sys.stdin.read())
    program = f"launch.{request['system']}"
    module = importlib.import_module(program)
    registry = module.FLAGS
    errors = []
    for args in request["argvs"]:
        registry.unparse_flags()
        try:
            rest = flags.FLAGS(registry([program, *args], known_only=True))
            if len(rest) > 1:
                raise ValueError(f"unexpected argument '{rest[1]}'")
            module.make_config()
            errors.append(None)
        except flags.UnrecognizedFlagError as error:
            errors.append(cli.unknown_flag_message(request["system"], registry, error.flagname))
        except (flags.Error, ValueError) as error:
            errors.append(str(error))
    answer = {"flags": sorted(registry), "resume": "resume" in registry, "errors": errors}
    print(_PROBE_MARK + json.dumps(answer), flush=True)


def probe_launcher(system: str, argvs: list[list[str]]) -> dict:
    """Runs `probe_main` for launch.<system> in a child process; raises ValueError if it fails."""
    request = json.dumps({"system": system, "argvs": argvs})
    try:
        done = subprocess.run(
            [sys.executable, "-c", "from launch.sweep import probe_main; probe_main()"], input=request,
            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise ValueError(f"reading the flags of launch.{system} took over {PROBE_TIMEOUT_S:.0f}s") from None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(_PROBE_MARK):
            return json.loads(line[len(_PROBE_MARK):])
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise ValueError(f"could not read the flags of launch.{system} (exit {done.returncode}: {last})")


# ---------------------------------------------------------------------------------------------------------------------
# Running


@dataclasses.dataclass
class RunEntry:
    """One run of this invocation: its place, what it does, its command and its record in the manifest."""

    index: int
    run: grid_lib.RunSpec
    run_dir: str
    action: str
    command: list[str]
    record: dict
    process: subprocess.Popen | None = None
    log: object | None = None
    started: float = 0.0


def _number(value) -> str:
    return "n/a" if value is None else f"{float(value):.4g}"


def _outcome(summary: dict | None) -> str:
    summary = summary or {}
    return f"final metric {_number(summary.get('final_metric'))}, sps {_number(summary.get('sps'))}"


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def clear_run_dir(run_dir: str) -> None:
    """Before a restart: removes a run directory's old outputs (stale CSVs, TensorBoard events, checkpoints of
    another attempt), keeping launch.log, so the new attempt does not mix with them."""
    if not os.path.isdir(run_dir):
        return
    for entry in os.listdir(run_dir):
        if entry == "launch.log":
            continue
        path = os.path.join(run_dir, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)  # the child leads its own group (start_new_session): it and its workers
    except (ProcessLookupError, PermissionError):
        pass


class Runner:
    """Starts the entries' children (at most `parallel` at a time), prints their progress and keeps the manifest."""

    def __init__(self, sweep_dir: str, manifest: dict, entries: list[RunEntry], parallel: int, total: int):
        self.sweep_dir = sweep_dir
        self.manifest = manifest
        self.entries = entries
        self.parallel = parallel
        self.total = total
        self.t0 = time.monotonic()
        self.running: list[RunEntry] = []
        self.counts = {"done": 0, "skipped": 0, "failed": 0, "interrupted": 0, "not started": 0}

    def say(self, entry: RunEntry, text: str) -> None:
        width, elapsed = len(str(self.total)), format_duration(time.monotonic() - self.t0)
        print(f"[{entry.index:>{width}}/{self.total} +{elapsed}] {text}", flush=True)

    def write_manifest(self) -> None:
        self.manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        write_json_atomic(os.path.join(self.sweep_dir, grid_lib.MANIFEST), self.manifest)

    def start(self, entry: RunEntry) -> None:
        if entry.action == START:
            clear_run_dir(entry.run_dir)
        os.makedirs(entry.run_dir, exist_ok=True)
        entry.log = open(os.path.join(entry.run_dir, "launch.log"), "a")
        entry.log.write(f"# {time.strftime('%Y-%m-%d %H:%M:%S')} launch.sweep: {shlex.join(entry.command)}\n")
        entry.log.flush()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        entry.started = time.monotonic()
        entry.process = subprocess.Popen(
            entry.command, stdout=entry.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True, preexec_fn=_default_sigint,
        )
        entry.record.update(status="running", exit_code=None, command=entry.command, resumed=entry.action == RESUME,
                            attempts=entry.record.get("attempts", 0) + 1,
                            started_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
        self.running.append(entry)
        self.write_manifest()
        resume = " (resume from its checkpoint)" if entry.action == RESUME else ""
        self.say(entry, f"start  {entry.run.name}{resume}")

    def finish(self, entry: RunEntry, code: int, *, stopping: bool) -> None:
        self.running.remove(entry)
        entry.log.close()
        elapsed = time.monotonic() - entry.started
        summary = grid_lib.read_summary(entry.run_dir)
        # A run stopped right after writing its final summary (exit code from the signal) is finished all the same.
        finished = grid_lib.run_state(entry.run_dir) == grid_lib.FINISHED and (code == 0 or stopping)
        if finished:
            status = "finished"
            self.counts["done"] += 1
            self.say(entry, f"done   {entry.run.name} in {format_duration(elapsed)}: {_outcome(summary)}")
        elif stopping:
            status = "interrupted"
            self.counts["interrupted"] += 1
            self.say(entry, f"stopped {entry.run.name} after {format_duration(elapsed)} (exit {code})")
        else:
            status = "failed"
            self.counts["failed"] += 1
            why = _last_line(os.path.join(entry.run_dir, "launch.log")) if code else "no finished summary.json"
            self.say(entry, f"FAILED {entry.run.name} after {format_duration(elapsed)}, exit {code}: {why} "
                            f"(log: {os.path.join(entry.run_dir, 'launch.log')})")
        entry.record.update(status=status, exit_code=code, elapsed_s=round(elapsed, 3),
                            final_metric=(summary or {}).get("final_metric"), sps=(summary or {}).get("sps"))
        self.write_manifest()

    def reap(self, *, stopping: bool = False) -> bool:
        """Records the children that have exited; True if any had."""
        exited = [(e, e.process.poll()) for e in self.running]
        exited = [(e, code) for e, code in exited if code is not None]
        for entry, code in exited:
            self.finish(entry, code, stopping=stopping)
        return bool(exited)

    def run(self) -> bool:
        """Runs every entry that is not skipped; False if interrupted (the children are stopped then)."""
        pending = [e for e in self.entries if e.action != SKIP]
        try:
            while pending or self.running:
                while pending and len(self.running) < self.parallel:
                    self.start(pending.pop(0))
                if not self.reap():
                    time.sleep(_POLL_S)
        except KeyboardInterrupt:
            self.counts["not started"] = len(pending)
            self.stop()
            return False
        return True

    def stop(self) -> None:
        """SIGINT to every running child's group, then SIGKILL after STOP_TIMEOUT_S or on a second Ctrl-C."""
        if not self.running:
            return
        print(f"sweep: interrupted; stopping {len(self.running)} running run(s) (they write a checkpoint; Ctrl-C "
              f"again kills them)", flush=True)
        for entry in self.running:
            _signal_group(entry.process, signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.running:
            try:
                if time.monotonic() > deadline:
                    raise KeyboardInterrupt
                if not self.reap(stopping=True):
                    time.sleep(_POLL_S)
            except KeyboardInterrupt:
                for entry in self.running:
                    _signal_group(entry.process, signal.SIGKILL)
                for entry in list(self.running):
                    self.finish(entry, entry.process.wait(), stopping=True)


def _acquire_lock(sweep_dir: str) -> str:
    """`<sweep_dir>/sweep.lock` with this pid, so two sweeps never run in one directory; a stale lock is taken over."""
    path = os.path.join(sweep_dir, "sweep.lock")
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                with open(path) as f:
                    pid = int(f.read().strip() or 0)
                os.kill(pid, 0)
            except (OSError, ValueError):  # the holder is gone (or the file is unreadable): stale
                os.remove(path)
                continue
            raise ValueError(f"another sweep (pid {pid}) is running in {sweep_dir} (if not, delete {path})") from None
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return path
    raise ValueError(f"could not lock {sweep_dir}")


def _fail(message) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_own_flags(argv: list[str], own: flags.FlagValues, doc: str, program: str) -> list[str]:
    """A tool's `app.run` flags_parser: parses its own flags (`own`) and returns [program, passed flags...] (what
    its `main` receives: everything else, for its runs); --help prints `doc` and its own flags; a bad flag is one
    `error:` line and exit 2."""
    args = list(argv[1:])
    if any(token in _HELP for token in args):
        print(f"{doc}\nFlags of {program}:\n{own.get_help(include_special_flags=False)}")
        sys.exit(0)
    mine, passed = split_argv(args, {name: own[name].boolean for name in own})
    own.unparse_flags()  # values of an earlier parse (tests) must not leak into this one
    try:
        own([argv[0], *mine])
    except flags.Error as error:
        _fail(" ".join(str(error).split()))
    if not flags.FLAGS.is_parsed():
        flags.FLAGS(argv[:1])
    return [argv[0], *passed]


def parse_flags(argv: list[str]) -> list[str]:
    """`app.run`'s flags_parser of the sweep (`parse_own_flags` over SWEEP_FLAGS)."""
    return parse_own_flags(argv, SWEEP_FLAGS, __doc__, "launch.sweep")


def main(argv):
    """argv: [program, flags passed to every run...] (from `parse_flags`)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in the background (SIGINT ignored)
    passthrough = list(argv[1:])
    try:
        plan = _plan(passthrough)
    except ValueError as error:
        _fail(error)
    entries = _entries(plan, passthrough)
    _print_plan(plan, entries, _PARALLEL.value, dry_run=_DRY_RUN.value)
    if _DRY_RUN.value:
        return
    runner, completed = _run_locked(plan, passthrough, entries, _PARALLEL.value)
    counts = ", ".join(f"{n} {what}" for what, n in runner.counts.items() if n or what in ("done", "failed"))
    print(f"sweep: {counts} of {len(entries)} runs in {format_duration(time.monotonic() - runner.t0)}; sweep_dir "
          f"{plan.sweep_dir}" + ("" if completed else f" (continue: rerun with --sweep_dir={plan.sweep_dir})"),
          flush=True)
    if not completed:
        sys.exit(130)
    if runner.counts["failed"]:
        sys.exit(1)


@dataclasses.dataclass
class _Plan:
    """What `main` checked before anything starts: the sweep's runs, their directories and states, the manifest
    of an earlier invocation in the same sweep_dir and whether the launcher takes --resume."""

    system: str
    grid: grid_lib.Grid
    seeds: tuple[int, ...]
    runs: list[grid_lib.RunSpec]
    sweep_dir: str
    old: dict | None
    run_dirs: list[str]
    states: list[str]
    supports_resume: bool


def _plan(passthrough: list[str]) -> _Plan:
    """Reads the sweep's flags and the sweep directory and checks everything the module docstring lists (the
    planned command lines in a `probe_launcher` child); ValueError for the first problem."""
    system = _SYSTEM.value
    if system is None:
        raise ValueError(f"--system is required (one of {', '.join(SYSTEMS)})")
    grid = grid_lib.build_grid(_SWEEP.value)
    seeds = grid_lib.parse_seeds(_SEEDS.value)
    if _PARALLEL.value < 1:
        raise ValueError(f"--parallel must be at least 1, got {_PARALLEL.value}")
    check_passthrough(passthrough, grid)
    runs = grid_lib.expand(grid, seeds)
    sweep_dir = os.path.normpath(_SWEEP_DIR.value or default_sweep_dir(system, grid, passthrough))
    old = grid_lib.read_manifest(sweep_dir)
    if old is not None:
        grid_lib.check_compatible(old, system=system, grid=grid, seeds=seeds, passthrough=passthrough)
    run_dirs = [os.path.join(sweep_dir, run.name) for run in runs]
    states = [grid_lib.run_state(d) for d in run_dirs]
    for run_dir, state in zip(run_dirs, states, strict=True):
        holder = rundir.holder_pid(run_dir) if state != grid_lib.FINISHED else None
        if holder is not None:  # e.g. a child left running by a sweep that was killed with SIGKILL
            raise ValueError(f"{run_dir} is in use by a running process (pid {holder}); stop it and rerun")
    named_args = [(run.name, run_args(passthrough, run, d))
                  for run, d, state in zip(runs, run_dirs, states, strict=True) if state != grid_lib.FINISHED]
    supports_resume = True
    if named_args:  # nothing is validated (nor a child started) when every run is finished
        probe = probe_launcher(system, [args for _, args in named_args])
        check_against_launcher(system, grid, named_args, probe)
        supports_resume = probe["resume"]
    return _Plan(system, grid, seeds, runs, sweep_dir, old, run_dirs, states, supports_resume)


def _entries(plan: _Plan, passthrough: list[str]) -> list[RunEntry]:
    """Every run of the grid with its action, command and manifest record (an earlier invocation's, updated)."""
    old_records = {r.get("name"): r for r in (plan.old or {}).get("runs", [])}
    entries = []
    for index, (run, run_dir, state) in enumerate(zip(plan.runs, plan.run_dirs, plan.states, strict=True), start=1):
        action = plan_action(state, supports_resume=plan.supports_resume)
        command = build_command(plan.system, run_args(passthrough, run, run_dir), resume=action == RESUME)
        record = dict(old_records.get(run.name, {}))
        record.update(name=run.name, flags=dict(run.flags), seed=run.seed)
        record.setdefault("command", command)
        record.setdefault("attempts", 0)
        record.setdefault("status", "pending")
        record.setdefault("exit_code", None)
        entries.append(RunEntry(index, run, run_dir, action, command, record))
    return entries


def _print_plan(plan: _Plan, entries: list[RunEntry], parallel: int, *, dry_run: bool) -> None:
    """The sweep's one-line header; with --dry_run also each run's action and planned command line."""
    to_run = sum(e.action != SKIP for e in entries)
    resumed = sum(e.action == RESUME for e in entries)
    print(f"sweep: launch.{plan.system}, {len(plan.runs)} runs ({len(plan.runs) - to_run} finished, {to_run} to run"
          f"{f', {resumed} resumed' if resumed else ''}), parallel {parallel}, sweep_dir {plan.sweep_dir}"
          + ("  [dry run]" if dry_run else ""), flush=True)
    if dry_run:
        width = len(str(len(entries)))
        for e in entries:
            tail = "" if e.action == SKIP else f": {shlex.join(e.command)}"
            print(f"[{e.index:>{width}}/{len(entries)}] {e.action:<6} {e.run.name}{tail}")


def _run_locked(plan: _Plan, passthrough: list[str], entries: list[RunEntry], parallel: int) -> tuple[Runner, bool]:
    """Holds `<sweep_dir>/sweep.lock` while the runs go (SIGTERM acting as Ctrl-C); returns the runner and whether
    the sweep completed (False: interrupted)."""
    os.makedirs(plan.sweep_dir, exist_ok=True)
    try:
        lock = _acquire_lock(plan.sweep_dir)
    except ValueError as error:
        _fail(error)
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    manifest = {
        "version": grid_lib.MANIFEST_VERSION, "system": plan.system, "module": f"launch.{plan.system}",
        "grid": grid_lib.grid_to_json(plan.grid), "seeds": list(plan.seeds), "passthrough": passthrough,
        "created": (plan.old or {}).get("created", now), "runs": [e.record for e in entries],
    }
    runner = Runner(plan.sweep_dir, manifest, entries, parallel, len(entries))
    previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        for e in entries:
            if e.action == SKIP:
                e.record["status"] = "finished"
                runner.counts["skipped"] += 1
                runner.say(e, f"skip   {e.run.name} (finished: {_outcome(grid_lib.read_summary(e.run_dir))})")
        runner.write_manifest()
        completed = runner.run()
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        os.remove(lock)
    return runner, completed


def _default_sigint() -> None:
    """In each child before exec: a sweep started in the background has SIGINT ignored, and children inherit that;
    the launchers must still turn the forwarded SIGINT into KeyboardInterrupt (checkpoint, summary, exit 130)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _raise_interrupt(signum, frame):
    del signum, frame
    raise KeyboardInterrupt


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
