"""rl-zoo3's own `train` script, made resumable: the learning benchmark's peer for runs that outlast a session.

Runs in the peer's venv, which has rl-zoo3 and Stable-Baselines3 but not this project:

    /tmp/learn-venv/bin/python benchmarks/zoo_resumable.py --checkpoint_every=N [--resume] <rl_zoo3.train's arguments>

Everything else is `rl_zoo3.train.train()` unchanged: it reads the tuned hyperparameters and builds the envs, the
model and the evaluation callback. This adds a callback that every N env steps saves a checkpoint folder with the model
(SB3's zip: weights, optimizer states, step and update counters), its replay buffer and its `VecNormalize`
statistics where it has them, written under a temporary name and renamed, and then `resume.json` naming it (written
and renamed last), so a kill at any moment leaves the previous checkpoint whole. `--resume` hands that checkpoint to
rl-zoo3's own continue-training path (`-i`, which loads the replay buffer and normalization beside the model) and trains
the remaining steps with SB3's `reset_num_timesteps=False`, so the step counter, the learning-rate schedule,
`learning_starts` and TD3's policy delay go on where they stopped.

Where a resumed run departs from an uninterrupted one: the episodes in progress restart, and the random generators
are seeded with seed + the checkpoint's step (SB3 does not save their states; seeding with the seed again would replay
the first part's draws). rl-zoo3 writes each part to an experiment folder of its own (`<env>_1`, `<env>_2`, ...) with
its evaluations (at global step counts) and monitor files; `zoo_parts.json` lists the parts and the step each started
at, which the benchmark uses to join them into one curve.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

RESUME_FILE = "resume.json"
PARTS_FILE = "zoo_parts.json"


def _write_json(path: str, value) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_json(path: str, default):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def _pop_flag(argv: list[str], name: str) -> str | None:
    """Removes `--name=value` or `--name` from argv; returns its value ("" for the bare flag) or None."""
    for i, arg in enumerate(argv):
        if arg == f"--{name}" or arg.startswith(f"--{name}="):
            del argv[i]
            return arg.partition("=")[2]
    return None


def _set_arg(argv: list[str], names: tuple, value: str) -> None:
    """Sets an rl-zoo3 argument (`-n 300000` form) to `value`, appending it when absent."""
    for i, arg in enumerate(argv):
        if arg in names:
            argv[i + 1] = value
            return
    argv += [names[0], value]


def _get_arg(argv: list[str], names: tuple, default: str) -> str:
    for i, arg in enumerate(argv):
        if arg in names:
            return argv[i + 1]
    return default


def plan(argv: list[str]) -> tuple[list[str], str, int, int]:
    """(rl-zoo3's arguments, run folder, checkpoint period, step resumed from) for this script's arguments; exits
    with a one-line error on bad ones. A resume points rl-zoo3's `-i` at the checkpoint, seeds with seed + its step
    and asks for the remaining steps."""
    argv = list(argv)
    every = _pop_flag(argv, "checkpoint_every")
    resume = _pop_flag(argv, "resume") is not None
    if not every or not every.isdigit() or int(every) <= 0:
        sys.exit("zoo_resumable: --checkpoint_every=N (env steps, N > 0) is required")
    run_dir = os.path.abspath(_get_arg(argv, ("-f", "--log-folder"), "logs"))
    total = int(_get_arg(argv, ("-n", "--n-timesteps"), "-1"))
    if total <= 0:
        sys.exit("zoo_resumable: -n (the run's total env steps) is required")
    state = _read_json(os.path.join(run_dir, RESUME_FILE), None) if resume else None
    if resume and state is None:
        sys.exit(f"zoo_resumable: --resume, but {run_dir} has no {RESUME_FILE}")
    start = state["step"] if state else 0
    if state:
        _set_arg(argv, ("-i", "--trained-agent"), os.path.join(run_dir, state["checkpoint"], "model.zip"))
        _set_arg(argv, ("--seed",), str(int(_get_arg(argv, ("--seed",), "0")) + start))
        _set_arg(argv, ("-n", "--n-timesteps"), str(total - start))
    return argv, run_dir, int(every), start


def main(argv: list[str]) -> None:
    argv, run_dir, every, start = plan(argv)
    _patch_rl_zoo3(run_dir, every, start)
    from rl_zoo3 import train as zoo_train

    sys.argv = [zoo_train.__file__, *argv]
    zoo_train.train()


def _patch_rl_zoo3(run_dir: str, every: int, start: int) -> None:
    """Adds the checkpoint callback to rl-zoo3's callbacks and, on a resume, keeps SB3's step counter going."""
    from rl_zoo3.exp_manager import ExperimentManager
    from stable_baselines3.common.callbacks import BaseCallback

    class Checkpoint(BaseCallback):
        def __init__(self, manager: ExperimentManager):
            super().__init__()
            self._manager = manager
            self._saved = start

        def _on_training_start(self) -> None:
            parts = _read_json(os.path.join(run_dir, PARTS_FILE), [])
            parts = [p for p in parts if p["start_step"] < start]  # parts after this checkpoint were lost
            folder = os.path.relpath(self._manager.save_path, run_dir)
            _write_json(os.path.join(run_dir, PARTS_FILE), [*parts, dict(folder=folder, start_step=start)])

        def _on_step(self) -> bool:
            if self.num_timesteps // every > self._saved // every:
                self._save(self.num_timesteps)
                self._saved = self.num_timesteps
            return True

        def _save(self, step: int) -> None:
            name = f"checkpoint_{step:012d}"
            tmp = os.path.join(run_dir, f"{name}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            self.model.save(os.path.join(tmp, "model.zip"))
            if hasattr(self.model, "save_replay_buffer"):
                self.model.save_replay_buffer(os.path.join(tmp, "replay_buffer.pkl"))
            normalize = self.model.get_vec_normalize_env()
            if normalize is not None:  # where rl-zoo3's continue-training path looks for it
                os.makedirs(os.path.join(tmp, str(self._manager.env_name)))
                normalize.save(os.path.join(tmp, str(self._manager.env_name), "vecnormalize.pkl"))
            shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)
            os.rename(tmp, os.path.join(run_dir, name))
            _write_json(os.path.join(run_dir, RESUME_FILE), dict(step=step, checkpoint=name))
            for old in os.listdir(run_dir):  # the newest checkpoint is the only one resume.json can name
                if old.startswith("checkpoint_") and old != name:
                    shutil.rmtree(os.path.join(run_dir, old), ignore_errors=True)

    create_callbacks = ExperimentManager.create_callbacks

    def create_callbacks_with_checkpoint(manager: ExperimentManager) -> None:
        create_callbacks(manager)
        manager.callbacks.append(Checkpoint(manager))

    ExperimentManager.create_callbacks = create_callbacks_with_checkpoint
    if start:
        _keep_step_counter()


def _keep_step_counter() -> None:
    """SB3's `learn` restarts its step counter unless told `reset_num_timesteps=False`; rl-zoo3 calls it without."""
    from rl_zoo3.utils import ALGOS

    for cls in set(ALGOS.values()):
        original = cls.learn

        def learn(self, total_timesteps, *args, _original=original, **kwargs):
            kwargs["reset_num_timesteps"] = False
            return _original(self, total_timesteps, *args, **kwargs)

        cls.learn = learn


if __name__ == "__main__":
    main(sys.argv[1:])
