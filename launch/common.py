"""What every training launcher shares: flags -> an on-policy config (`config_from_flags`), `run_main` (exit
statuses, Ctrl-C and SIGTERM) and `launch`. The flags themselves are each launcher's own (`launch.flagsets`).

Hyperparameter flags default to None, meaning "the preset": the task's own tuned one where there is one
(`systems.common.presets.TASK_PRESETS`, e.g. rl-zoo3's PPO for CartPole-v1), else that of its env family and
algorithm (Atari: CleanRL PPO / HTS-RL A2C; GFootball: the HTS-RL scripts; classic control: CleanRL;
`systems.common.presets.PRESETS`); `--preset=family` takes the family's even where a task has its own."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable

from absl import flags, logging

from envs.factory import family_of, resolve_env_id
from launch import cli, flagsets
from systems.common import config as config_lib
from systems.common import presets
from systems.common.xla_flags import prefer_memory_saving_cpu_schedule

# Config fields set from the flag of the same name when the launcher has it and it was given (else: the preset):
# the on-policy hyperparameters (`launch.flagsets`, declared in `TrainConfig`), the run's length and HTS's actors.
_PRESET_FIELDS = (
    "num_envs", "num_actors", "total_steps", *flagsets.ON_POLICY_HYPERPARAMETERS, *flagsets.PPO_HYPERPARAMETERS,
    *flagsets.NORMALIZATION_HYPERPARAMETERS, *flagsets.RECURRENT_HYPERPARAMETERS,
)
# Fields beyond the "run" group read from the launcher's flag when it has one (the config's default otherwise).
_PLAIN_FIELDS = ("eval_deterministic", "step_time")


def config_from_flags(
    launcher_flags: flags.FlagValues,
    config_cls: type = config_lib.TrainConfig,
    *,
    defaults: dict | None = None,
    extra: dict | None = None,
    validate: bool = True,
    algo: str | None = None,
):
    """Flags -> validated config. Raises ValueError with one clear line on a bad value.

    Precedence: a flag given on the command line, then the system's `defaults` (e.g. BA3C's optimizer), then the
    preset of the env family and algorithm. `extra` holds the system's own fields (already read from its flags).
    """
    f = launcher_flags
    env_id = resolve_env_id(f.game, f.env)
    algo = algo or f.algo or "ppo"
    preset_name, values = presets.preset_values(env_id, family_of(env_id), algo, config_cls,
                                                   f.preset if "preset" in f else "task")
    values.update(defaults or {})
    for name in _PRESET_FIELDS:
        if name in f and f[name].value is not None:
            values[name] = f[name].value
    if f.hidden_sizes is not None:
        values["hidden_sizes"] = cli.int_list("hidden_sizes", f.hidden_sizes)
    values.update(run_schedule(f, values.get("total_steps", config_lib.TrainConfig.total_steps)))
    plain = {name: f[name].value for name in _PLAIN_FIELDS if name in f}
    config = config_cls(env_id=env_id, algo=algo, preset=preset_name, **settings_from_flags(f, config_cls, "run"),
                        **plain, **values,
                        **(extra or {}))
    if validate:
        config_lib.validate(config)
    return config


def settings_from_flags(launcher_flags: flags.FlagValues, config_cls: type, group: str) -> dict:
    """The values of `config_cls`'s `setting` fields of `group` (`systems.common.config.setting`) from their flags,
    which default to the field's own default."""
    return {field.name: launcher_flags[field.name].value for field in dataclasses.fields(config_cls)
            if field.metadata.get("group") == group and field.metadata["preset"] is False}


def preset_overrides(launcher_flags: flags.FlagValues, config_cls: type, groups: tuple[str, ...], *,
                     batch_auto: bool = False) -> dict:
    """The values of `config_cls`'s `hyperparameter` fields of `groups` whose flags were given (their default None
    means the preset's), parsed: `hidden_sizes` from "256,256", `batch_size` a count (or 'auto' -> 0 where
    `batch_auto`)."""
    values = {}
    for field in dataclasses.fields(config_cls):
        if field.metadata.get("group") not in groups or not field.metadata["preset"]:
            continue
        value = launcher_flags[field.name].value
        if value is None:
            continue
        if field.name == "hidden_sizes":
            value = cli.int_list(field.name, value)
        elif field.name == "batch_size":
            value = cli.parse_count(value, field.name, auto=batch_auto)
        values[field.name] = value
    return values


def run_schedule(launcher_flags: flags.FlagValues, total_steps: int) -> dict:
    """`eval_every` and `checkpoint_every` from their flags, else about 20 evaluations per run (so the final metric
    has its last ten policies) and 10 checkpoints."""
    f = launcher_flags
    schedule = {"eval_every": f.eval_every if f.eval_every is not None else max(total_steps // 20, 1)}
    if "checkpoint_every" in f:
        schedule["checkpoint_every"] = (
            f.checkpoint_every if f.checkpoint_every is not None else max(total_steps // 10, 1)
        )
    return schedule


def multihost_values(launcher_flags: flags.FlagValues) -> dict:
    """The multi-host fields (launch.hts, launch.ba3c, launch.gala and launch.anakin)."""
    return settings_from_flags(launcher_flags, config_lib.MultiHostConfig, "multi_host")


def flag_given(launcher_flags: flags.FlagValues, name: str) -> bool:
    """True when `--name` was set on the command line (or by a test), not left at its default."""
    flag = launcher_flags[name]
    return flag.present > 0 or flag.value != flag.default


def launch(launcher: str, launcher_flags: flags.FlagValues, main: Callable[[list[str]], None], doc: str | None):
    """`app.run(main)` with the launcher's own flags (`launch.cli.launcher_parser`), after the XLA settings the
    launchers run with (`systems.common.xla_flags`): XLA reads them once, when JAX starts its backend."""
    from absl import app

    prefer_memory_saving_cpu_schedule()
    app.run(main, flags_parser=cli.launcher_parser(launcher, launcher_flags, doc))


class Terminated(KeyboardInterrupt):
    """SIGTERM (what schedulers and `kill` send), raised in the main thread where Ctrl-C's KeyboardInterrupt would be,
    so every system's Ctrl-C path runs: newest checkpoint, summary, children stopped. Exit status 143."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT), as raised by `_stop`: a KeyboardInterrupt that `_redeliver_a_lost_stop` can tell apart."""


def _stop(signum, frame):  # a signal handler's signature
    """The first Ctrl-C (KeyboardInterrupt) or SIGTERM (`Terminated`) stops the run, which then saves; any later one
    is only noted: GNU `timeout` and process managers signal a process and then its group, and a second exception
    raised in the middle of the save would lose the whole run."""
    signal.signal(signal.SIGINT, _already_stopping)
    signal.signal(signal.SIGTERM, _already_stopping)
    raise Terminated if signum == signal.SIGTERM else Interrupted


def _redeliver_a_lost_stop(unraisable) -> None:
    """`sys.unraisablehook`: a stop raised where Python drops exceptions (a garbage-collector callback such as JAX's,
    a `__del__`, a weakref callback) would be lost, and with the second signal only noted the run never stopped
    (seen: SIGTERM then SIGINT inside `_xla_gc_callback`; the run hung). It is raised again, at the main thread's next
    moment, with the handlers armed as before it: the signal is sent again to the main thread from another thread
    (sent from here, its handler would run inside this hook, which drops exceptions too)."""
    stop = unraisable.exc_value
    if isinstance(stop, (Terminated, Interrupted)):
        import threading

        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        signum = signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT
        threading.Timer(0.01, signal.pthread_kill, (threading.main_thread().ident, signum)).start()
        return
    sys.__unraisablehook__(unraisable)


def _already_stopping(signum, frame):  # a signal handler's signature
    os.write(2, b"already stopping: saving the newest parameters first (SIGKILL abandons the save; the checkpoints "
                b"written before stay whole)\n")


# Exit statuses of every launcher (docs/getting-started.md, "Stopping a run"); the others live in launch.cli.
EXIT_NON_FINITE = 3
EXIT_IO_ERROR = 74  # sysexits.h EX_IOERR: a write failed (full disk, read-only file system, file-size limit)
EXIT_UNAVAILABLE = 69  # sysexits.h EX_UNAVAILABLE: a multi-host job did not form within --startup_timeout
EXIT_ENV_FAILED = 70  # sysexits.h EX_SOFTWARE: a user's env raised, returned a wrong shape, hung or its worker died
EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED = cli.EXIT_BAD_INPUT, cli.EXIT_INTERRUPTED, cli.EXIT_TERMINATED


def run_main(
    run: Callable[[config_lib.RunConfig], dict],
    make_config: Callable[[], config_lib.RunConfig],
) -> dict:
    """Builds the config (bad values: one line on stderr, exit 2) and runs. Ctrl-C exits 130 and SIGTERM 143, each
    after a checkpoint of the newest parameters; a non-finite loss or parameter exits 3 with one line; a failed
    write (full disk, read-only file system) exits 74 with one line."""
    # Start-up noise a user cannot act on: JAX's INFO line about a missing TPU runtime and gymnasium's warning
    # about casting float64 space bounds of classic-control tasks to float32.
    logging.set_verbosity(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
    # A shell starts background jobs (`nohup python -m launch.hts ... &` in a script) with SIGINT ignored, and Python
    # then never raises KeyboardInterrupt: `kill -INT` must still checkpoint and exit 130.
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    sys.unraisablehook = _redeliver_a_lost_stop
    try:
        config = make_config()
        if getattr(config, "track", False):
            from systems.common.tracking import require_wandb  # JAX starts after the XLA flags

            require_wandb()
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    from envs.pool_api import EnvFailed  # JAX starts after the XLA flags
    from systems.common.distributed import JobDidNotStart
    from systems.common.finite import NonFiniteError

    try:
        return run(config)
    except JobDidNotStart as error:  # a thread still waits inside JAX: exit without finalizing
        print(f"error: {error}", file=sys.stderr)
        _exit_without_finalizing(EXIT_UNAVAILABLE)
    except config_lib.ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        _exit(EXIT_BAD_INPUT)
    except NonFiniteError as error:
        print(f"error: {error}", file=sys.stderr)
        _exit(EXIT_NON_FINITE)
    except EnvFailed as failure:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        saved = _where_saved(failure)
        print(f"error: {failure}; " + (saved or "the run had saved nothing"), file=sys.stderr)
        if failure.detail:
            print(failure.detail.rstrip(), file=sys.stderr)
        _exit(EXIT_ENV_FAILED)
    except OSError as error:  # the run's directory became unwritable: earlier checkpoints are whole (atomic writes)
        what = f"cannot write {error.filename}: " if error.filename else ""
        print(f"error: {what}{error.strerror or error}; the run stopped (any checkpoint it wrote before is whole)",
              file=sys.stderr)
        _exit(EXIT_IO_ERROR)
    except KeyboardInterrupt as stop:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the exit below must not be interrupted in turn
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        from systems.common.distributed import PeerStopped  # JAX starts after the XLA flags

        name = ("terminated (SIGTERM)" if isinstance(stop, Terminated) else
                "stopped: another process of the job stopped or failed" if isinstance(stop, PeerStopped) else
                "interrupted")
        saved = _where_saved(stop)
        if saved:
            print(f"{name}; {saved}", file=sys.stderr)
        else:
            print(f"{name} before the run could save anything", file=sys.stderr)
        from systems.common.learner import compiles_in_progress  # JAX starts after the XLA flags

        if compiles_in_progress():
            print("waiting for the update's compile to finish before exiting (XLA cannot stop one midway)",
                  file=sys.stderr)
        status = EXIT_TERMINATED if isinstance(stop, Terminated) else EXIT_INTERRUPTED
        if saved and not _multi_process():  # stopped cleanly: a normal exit runs multiprocessing's finalizers
            sys.exit(status)
        _exit_without_finalizing(status)
    except Exception:  # a bug, not a user's mistake: its traceback, then the exit a multi-process job needs
        if not _multi_process():
            raise
        traceback.print_exc()
        print(f"error: process {_process_index()} of this job failed (above); the others stop when they miss it",
              file=sys.stderr)
        _exit_without_finalizing(1)


def _where_saved(stop: BaseException) -> str:
    """Where a stopped run saved its newest parameters and how to continue it ("" when it saved nothing), from the
    marks `Monitor.saved` leaves on the exception."""
    checkpoint = getattr(stop, "checkpoint", None)
    if not checkpoint:
        return ""
    return f"the newest parameters are saved in {checkpoint} (continue with --resume --logdir={stop.run_dir})"


def _exit(status: int) -> None:
    """A failed run's exit: a normal one, or in a multi-process job one that does not wait at JAX's shutdown barrier
    for peers blocked in a collective this process will never join (they would wait 5 minutes, then abort)."""
    if _multi_process():
        _exit_without_finalizing(status)
    sys.exit(status)


def _process_index() -> int:
    return sys.modules["jax"].process_index()


def _multi_process() -> bool:
    """A `jax.distributed` job: a stopped process must not wait at JAX's shutdown barrier for the others, nor tear
    JAX down under a learner thread blocked in a collective they will never join (it aborted, exit 134)."""
    jax = sys.modules.get("jax")
    return jax is not None and jax.process_count() > 1


def _exit_without_finalizing(status: int) -> None:
    """Exits once every background compile is done, skipping the interpreter's finalization: after a Ctrl-C that
    interrupted a compile in the main thread (the network's initializer, seconds into start-up), XLA segfaulted
    while Python tore it down (exit -11 instead of 130). Used for a stop before the run could save anything, so
    nothing is lost, and for a process of a multi-process job once it has saved (`_multi_process`); EnvPool's own
    threads, if any, end with the process."""
    from systems.common.learner import wait_for_compiles  # JAX starts after the XLA flags

    wait_for_compiles()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

