"""`python -m launch.evaluate --run=DIR`: evaluate a saved policy with the papers' protocol.

The policy is rebuilt from the run directory of any training launcher (`systems.common.restore`: config.json and the
newest checkpoint) and played on evaluation envs by `systems.common.evaluation.Evaluator`, the protocol of seed 000,
section 5: one fresh env per episode, Atari with up to 30 no-op starts, no life-loss episode ends and unclipped
rewards, so returns are real game scores (`envs.factory.make_pool(evaluation=True)`).

Flags (all prefixed `eval_`, so none reads like the training launchers' `--eval_episodes`, `--eval_deterministic` or
`--seed`, which mean something else there):

* `--run` (required): the run directory.
* `--eval_num_episodes` (10, the episodes of one evaluation in seed 000 section 5).
* `--eval_policy`: `sampled` (default; a ~ pi(.|s), how HTS-RL's evaluations act and what the training launchers
  do unless `--eval_deterministic`) or `greedy` (the mode: argmax / Gaussian mean). Off-policy runs (PAL,
  Spreeze): `greedy` is their own evaluation action, `sampled` their actors' exploration at the end of training.
* `--eval_seed`: env seeds (env i gets seed + i) and the action keys; default: the run's own evaluation seed.
* `--eval_learner`: GALA only: the learner whose parameters x_i are played (default 0, as the GALA run's own
  evaluations), or `mean` for the average xbar of all learners (seed 004, Proposition 1).
* `--capture_video=PATH` (.mp4 or .gif): also film one episode of the same policy (the evaluation's env 0), in
  real frames where the simulator gives them: Atari's colour screen at 210x160, classic control and Box2D pictures,
  MuJoCo scenes with the `mujoco` package (`systems.common.video`, `envs.rendering`). MP4 needs the video extra
  (`pip install -e ".[video]"`); without it the video is written as a GIF beside the asked-for name.
* `--eval_gif=PATH`: also save one episode as an animated GIF of what the policy *sees*, drawn from the observation
  (`--eval_gif_frames` caps the frames; longer episodes are subsampled evenly): Atari's newest frame of the
  (4, 84, 84) stack, upscaled; GFootball's (72, 96, 4) super mini map as a coloured pitch (left team yellow, right
  team blue, active player red, ball white); vector observations as `systems.common.drawing` draws them (the
  pendulum itself, or bar charts).
* `--eval_out`: JSON with the returns, mean, std, checkpoint and policy mode (written atomically); default
  `<run>/evaluation.json`.

Bad input (missing directory, no checkpoint, unsupported system, bad flag value): one `error: ...` line on stderr
and exit code 2.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
import warnings

import jax
import numpy as np
from absl import app, flags, logging

from envs.episodes import EpisodeTracker
from envs.factory import EnvSpec, make_pool
from launch import cli
from systems.common import drawing, video
from systems.common import restore as restore_lib
from systems.common.config import MAX_EVAL_EPISODES, ConfigError
from systems.common.evaluation import Evaluator, start_episodes
from systems.common.outputs import params_fingerprint, write_json_atomic
from systems.registry import ENTRIES

_RUN = flags.DEFINE_string("run", None, "Run directory to evaluate (written by launch.hts/sync/ba3c/gala/pal/"
                           "spreeze).")
_EPISODES = flags.DEFINE_integer("eval_num_episodes", 10, "Evaluation episodes (one env each).")
_POLICY = flags.DEFINE_enum(
    "eval_policy", "sampled", list(restore_lib.POLICY_MODES),
    "sampled: draw a ~ pi(.|s) (default; off-policy runs: their exploration policy); greedy: the mode / mean action.",
)
_SEED = flags.DEFINE_integer("eval_seed", None, "Seed of the evaluation envs and action keys (default: the run's "
                             "own evaluation seed).")
_LEARNER = flags.DEFINE_string("eval_learner", "0", "GALA: learner index to evaluate, or 'mean' for the average of "
                               "all learners' parameters.")
_GIF = flags.DEFINE_string("eval_gif", None, "Also save one episode of the policy as an animated GIF at this path.")
_GIF_FRAMES = flags.DEFINE_integer("eval_gif_frames", 1000, "Most frames in the GIF (longer episodes are "
                                   "subsampled).")
_VIDEO = flags.DEFINE_string("capture_video", None, "Also film one episode of the policy in real frames (where "
                             "the simulator gives them) to this .mp4 or .gif file.")
_OUT = flags.DEFINE_string("eval_out", None, "Result JSON (default: <run>/evaluation.json).")

SEED_MAX = 2**31 - 1  # EnvPool seeds are int32 and env i gets seed + i


def record_episode(spec: EnvSpec, act, params, *, seed: int, max_frames: int):
    """Plays one evaluation episode (a 1-env evaluation pool seeded `seed`, so it is the evaluation's env 0; keys as
    the Evaluator draws them) and draws it. Frame t shows the state the action of step t was taken in, that action and
    the return including its reward (Atari evaluation pools do not clip rewards); the last frame shows the final
    state. Returns (frames, steps per kept frame, episode return, episode length), return and length from
    `envs.episodes.EpisodeTracker`."""
    draw = drawing.observation_drawer(spec)
    pool = make_pool(spec, num_envs=1, batch_size=1, seed=seed, num_threads=1, evaluation=True)
    tracker = EpisodeTracker(1, spec.family, spec.max_episode_steps)
    sampler = drawing.FrameSampler(max_frames - 1)
    key = jax.random.PRNGKey(seed)
    finished: list = []
    ret, step = 0.0, 0
    try:
        obs, _ = pool.reset()
        start_episodes(act)
        while not finished:
            if step > spec.max_episode_steps + 1:  # the tracker ends every episode by then (truncation)
                raise RuntimeError(f"an episode of {spec.env_id} did not end after {step} steps")
            key, step_key = jax.random.split(key)
            actions = np.asarray(act(params, obs, step_key))
            if spec.continuous:
                actions = np.clip(actions, spec.action_low, spec.action_high)
            next_obs, rewards, terminated, truncated, info = pool.step(actions)
            tracker.step(np.asarray(info["env_id"]), rewards, terminated, truncated, info)
            reward = float(np.asarray(rewards)[0])
            ret += reward
            sampler.offer(lambda o=obs[0], a=actions[0], t=step, r=reward, g=ret: draw(o, a, t, r, g))
            obs = next_obs
            step += 1
            finished = tracker.pop_finished()
    finally:
        pool.close()
    _, episode_return, length = finished[0]
    frames = sampler.frames + [draw(obs[0], None, step, 0.0, episode_return)]
    return frames, sampler.stride, float(episode_return), int(length)


# ----------------------------------------------------------------------------------------------------- main


def _summary_fingerprint(run_dir: str, env_steps: int) -> str | None:
    """summary.json's fingerprint when it describes the same policy as the checkpoint (same env steps)."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return None
    if int(summary.get("env_steps", -1)) != env_steps:
        return None
    return summary.get("param_fingerprint")


def _validate_flags() -> None:
    if not _RUN.value:
        raise ConfigError("--run is required: the run directory to evaluate")
    if not 1 <= _EPISODES.value <= MAX_EVAL_EPISODES:
        raise ConfigError(f"--eval_num_episodes must be in [1, {MAX_EVAL_EPISODES:,}] (one env per episode, all of "
                          f"them in one pool), got {_EPISODES.value:,}")
    if _SEED.value is not None and not 0 <= _SEED.value <= SEED_MAX - _EPISODES.value:
        raise ConfigError(f"--eval_seed must be in [0, {SEED_MAX - _EPISODES.value}], got {_SEED.value}")
    if _GIF_FRAMES.value < 2:
        raise ConfigError(f"--eval_gif_frames must be at least 2, got {_GIF_FRAMES.value}")
    if _GIF.value is not None and not _GIF.value.lower().endswith(".gif"):
        raise ConfigError(f"--eval_gif must name a .gif file, got '{_GIF.value}'")
    if _VIDEO.value is not None:
        try:
            video.check_path(_VIDEO.value)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    for flag, path in (("capture_video", _VIDEO.value), ("eval_gif", _GIF.value), ("eval_out", _OUT.value)):
        if path is not None:
            _require_writable(flag, path)


def _require_writable(flag: str, path: str) -> None:
    """Before the evaluation runs: the file's directory exists (it is created) and takes a file, so a bad path costs
    no evaluation."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"--{flag}={path}: cannot create its directory {directory} ({error.strerror or error})"
                          ) from None
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".write-check-"):
            pass
    except OSError as error:
        raise ConfigError(f"--{flag}={path}: cannot write in {directory} ({error.strerror or error})") from None


def evaluate() -> dict:
    """Restores the run, evaluates it (and records the GIF); returns the result written to --eval_out."""
    _validate_flags()
    run_dir = _RUN.value
    restored = restore_lib.restore_run(run_dir, ENTRIES)
    learner = _LEARNER.value.strip().lower()
    params = restored.policy_params(learner)
    act = restored.make_act(_POLICY.value)
    seed = restored.eval_seed if _SEED.value is None else _SEED.value
    if not 0 <= seed <= SEED_MAX - _EPISODES.value:
        raise ConfigError(f"the run's evaluation seed {seed} leaves no room for {_EPISODES.value} envs: "
                          "set --eval_seed")
    out = _OUT.value or os.path.join(run_dir, "evaluation.json")
    start = time.perf_counter()
    evaluator = Evaluator(restored.spec, None, episodes=_EPISODES.value, seed=seed,
                          deterministic=_POLICY.value == "greedy", act_fn=act)
    returns = evaluator.run(params)
    fingerprint = params_fingerprint(restored.params)
    expected = _summary_fingerprint(run_dir, restored.env_steps)
    result = {
        "run_dir": run_dir,
        "system": restored.system,
        "env_id": restored.spec.env_id,
        "algo": restored.config.algo,
        "checkpoint": restored.checkpoint_path,
        "checkpoint_env_steps": restored.env_steps,
        "checkpoint_update_step": restored.update_step,
        "policy": _POLICY.value,
        "learner": learner if restored.system == "gala" else None,
        "eval_seed": seed,
        "episodes": len(returns),
        "returns": [float(r) for r in returns],
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "min_return": float(np.min(returns)),
        "max_return": float(np.max(returns)),
        "param_fingerprint": fingerprint,
        "fingerprint_matches_summary": None if expected is None else fingerprint == expected,
        "wall_time": time.perf_counter() - start,
        "gif": None,
        "video": None,
    }
    write_json_atomic(out, result)  # first without the films: a failed one must not lose the evaluation
    try:
        _film(result, restored, act, params, seed, evaluator)
    except OSError as error:
        what = f"cannot write {error.filename}: " if error.filename else ""
        raise FilmNotWritten(f"{what}{error.strerror or error}; the evaluation itself is saved in {out}") from None
    if result["gif"] or result["video"]:
        write_json_atomic(out, result)
    result["out"] = out
    return result


class FilmNotWritten(RuntimeError):
    """A GIF or video could not be written after the evaluation ran (full disk, ...); one line, exit 74."""


def _film(result: dict, restored, act, params, seed: int, evaluator: Evaluator) -> None:
    """`--eval_gif` and `--capture_video`: one more episode each, filmed; their entries of the result."""
    if _GIF.value:
        frames, stride, gif_return, gif_length = record_episode(
            restored.spec, act, params, seed=seed, max_frames=_GIF_FRAMES.value
        )
        directory = os.path.dirname(os.path.abspath(_GIF.value))
        os.makedirs(directory, exist_ok=True)
        frame_ms = drawing.FAMILY_FRAME_MS.get(restored.spec.family, drawing.FRAME_MS) * stride
        written = drawing.save_gif(frames, _GIF.value, frame_ms=frame_ms, max_frames=len(frames))
        result["gif"] = {"path": _GIF.value, "frames": written, "steps_per_frame": stride,
                         "episode_return": gif_return, "episode_length": gif_length}
    if _VIDEO.value:
        film = evaluator.record_video(params, _VIDEO.value)
        fields = (f.name for f in dataclasses.fields(film) if f.name != "preview")  # the preview is TensorBoard's
        result["video"] = {name: getattr(film, name) for name in fields}


def describe(result: dict) -> str:
    """The one-line report: mean +- std over N episodes, checkpoint and policy."""
    learner = f"  learner {result['learner']}" if result["learner"] is not None else ""
    line = (
        f"[evaluate] {result['system']} {result['env_id']}  checkpoint {result['checkpoint_env_steps']:,} env "
        f"steps (update {result['checkpoint_update_step']:,})  {result['policy']} policy{learner}  "
        f"seed {result['eval_seed']}: "
        f"return {result['mean_return']:.2f} +- {result['std_return']:.2f} over {result['episodes']} episodes"
    )
    if result["fingerprint_matches_summary"] is False:
        line += "  (WARNING: parameters differ from summary.json's fingerprint)"
    if result["gif"] is not None:
        gif = result["gif"]
        line += f"\n[evaluate] GIF: {gif['path']} ({gif['frames']} frames, return {gif['episode_return']:.2f})"
    if result["video"] is not None:
        film = result["video"]
        cut = "" if film["complete"] else ", cut short"
        line += (f"\n[evaluate] video: {film['path']} ({film['frames']} frames, return {film['episode_return']:.2f}"
                 f"{cut}; {film['note']})")
    return line + f"\n[evaluate] written: {result['out']}"


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {' '.join(argv[1:])} (give the run as --run=DIR)", file=sys.stderr)
        sys.exit(2)
    # Start-up noise a user cannot act on (as launch.common.run_main silences it).
    logging.set_verbosity(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
    try:
        result = evaluate()
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except FilmNotWritten as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(74)
    print(describe(result), flush=True)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
