"""`python -m launch.spreeze --env=Pendulum-v1`: Spreeze (seed 002): sampler processes writing into a shared-memory
replay, one large-batch SAC / TD3 / DDPG learner, weights by file, a test process.

Takes the off-policy flags of launch.pal that apply (--algo, --buffer_size, --learning_starts, --hidden_sizes,
--tau, --critic_learning_rate, --action_noise, ...) and the shared run flags; `--num_samplers` and `--batch_size`
accept `auto` (section 3.4)."""

import dataclasses

from absl import app, flags

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from envs.factory import family_of, resolve_env_id  # noqa: E402
from launch import common  # noqa: E402
from launch import pal as launch_pal  # also defines the off-policy flags  # noqa: E402
from systems.spreeze import system  # noqa: E402

_NUM_SAMPLERS = flags.DEFINE_string("num_samplers", "2", "Sampler processes, or 'auto' (section 3.4).")
_ENVS_PER_SAMPLER = flags.DEFINE_integer("envs_per_sampler", 1, "Envs of each sampler's own EnvPool.")
_PUBLISH_EVERY = flags.DEFINE_integer("publish_every", 50, "Learner updates between weight files.")
_TRANSFER = flags.DEFINE_enum("transfer", "shm", list(system.REPLAYS), "Experience transfer: shared memory or queue.")
_MODEL_PARALLEL = flags.DEFINE_boolean("model_parallel", False, "SAC: actor on one device, critics on another.")
_RENDER = flags.DEFINE_boolean("render", False, "Visualization process: rollout GIFs of the newest policy.")
_RENDER_EVERY = flags.DEFINE_float("render_every", 30.0, "Seconds between rollout GIFs.")
_TUNE_SECONDS = flags.DEFINE_float("tune_seconds", 3.0, "Measuring time per value tried by the auto tuning.")

# Pendulum-v1 (SB3 rl-zoo SAC), MuJoCo (CleanRL sac_continuous_action.py).
PRESETS = {
    "classic": dict(total_steps=20_000, learning_rate=1e-3, batch_size=256, buffer_size=100_000,
                    learning_starts=1_000, tau=0.005, hidden_sizes=(256, 256), gamma=0.99, eval_every=2_000),
    "mujoco": dict(total_steps=1_000_000, learning_rate=3e-4, critic_learning_rate=1e-3, batch_size=256,
                   buffer_size=1_000_000, learning_starts=5_000, tau=0.005, hidden_sizes=(256, 256), gamma=0.99,
                   eval_every=10_000),
}
_FLAG_FIELDS = ("total_steps", "learning_rate", "gamma", "max_grad_norm", "opt_eps", "buffer_size", "learning_starts",
                "critic_learning_rate", "tau", "action_noise")


def make_config() -> system.SpreezeConfig:
    for name in ("num_envs", "sync_interval", "gae_lambda", "num_actors", "num_learners", "update_interval",
                 "replay", "envs_per_actor", "allocate", "checkpoint_buffer", "step_time", "clip_value_loss",
                 "normalize_obs", "obs_clip", "normalize_reward", "reward_clip", "clip_actions"):
        if common.flag_given(name):
            raise ValueError(f"--{name} does not apply to launch.spreeze")
    f = flags.FLAGS
    env_id = resolve_env_id(f.game, f.env)
    algo = f.algo or "sac"
    if algo not in system.CONTINUOUS_ALGOS:
        raise ValueError(f"launch.spreeze trains {', '.join(system.CONTINUOUS_ALGOS)}; got --algo={algo}")
    family = family_of(env_id)
    values = dict(PRESETS.get(family, PRESETS["classic"]))
    for name in _FLAG_FIELDS:
        if common.flag_given(name) and getattr(f, name) is not None:
            values[name] = getattr(f, name)
    if f.hidden_sizes is not None:
        values["hidden_sizes"] = cli.int_list("hidden_sizes", f.hidden_sizes)
    if f.batch_size is not None:
        values["batch_size"] = launch_pal.parse_count(f.batch_size, "batch_size", auto=True)
    values.setdefault("max_grad_norm", 0.0)
    values.setdefault("opt_eps", 1e-8)
    values.setdefault("critic_learning_rate", 0.0)
    if f.eval_every is not None:
        values["eval_every"] = f.eval_every
    num_samplers = launch_pal.parse_count(_NUM_SAMPLERS.value, "num_samplers", auto=True)
    config = system.SpreezeConfig(
        env_id=env_id, algo=algo, seed=f.seed, num_samplers=num_samplers, envs_per_sampler=_ENVS_PER_SAMPLER.value,
        publish_every=_PUBLISH_EVERY.value, transfer=_TRANSFER.value, model_parallel=_MODEL_PARALLEL.value,
        stop_at_target=launch_pal.STOP_AT_TARGET.value, tune_seconds=_TUNE_SECONDS.value, render=_RENDER.value,
        render_every=_RENDER_EVERY.value,
        logdir=f.logdir, resume=f.resume, eval_episodes=f.eval_episodes, time_limit=f.time_limit,
        target_return=f.target_return, quiet=f.quiet, checkpoint_every=0, **values,
    )
    system.validate(config)
    return dataclasses.replace(config, num_envs=max(1, config.num_samplers) * config.envs_per_sampler)


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags)
