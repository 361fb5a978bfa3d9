"""`python -m launch.spreeze --env=Pendulum-v1`: Spreeze (seed 002): sampler processes writing into a shared-memory
replay, one large-batch SAC / TD3 / DDPG learner, weights by file, a test process.

Flags (`--help` lists them with their defaults): the run group (without --checkpoint_every; the weight files
published every `--publish_every` updates are the checkpoints), the off-policy group shared with launch.pal, and
Spreeze's processes (`launch.flagsets`); `--num_samplers` and `--batch_size` accept `auto` (section 3.4)."""

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from envs.factory import family_of, resolve_env_id  # noqa: E402
from launch import common, flagsets  # noqa: E402
from systems.spreeze import system  # noqa: E402

FLAGS = flagsets.flag_values("spreeze")

# Pendulum-v1 (SB3 rl-zoo SAC, but 64x64 networks), MuJoCo (CleanRL sac_continuous_action.py).
# Classic control takes 64x64 networks, not rl-zoo's 256x256: Spreeze's samplers run free, so the learner's speed sets
# the updates per env step. On a small CPU machine a 256x256 SAC update is slow enough that Pendulum needs about four
# times the env steps and the time of 64x64 networks to reach -200 (`benchmarks/spreeze.py`).
PRESETS = {
    "classic": dict(total_steps=20_000, learning_rate=1e-3, batch_size=256, buffer_size=100_000,
                    learning_starts=1_000, tau=0.005, hidden_sizes=(64, 64), gamma=0.99, eval_every=2_000),
    "mujoco": dict(total_steps=1_000_000, learning_rate=3e-4, critic_learning_rate=1e-3, batch_size=256,
                   buffer_size=1_000_000, learning_starts=5_000, tau=0.005, hidden_sizes=(256, 256), gamma=0.99,
                   eval_every=10_000),
}
PRESETS["brax"] = PRESETS["mujoco"]  # Brax's tasks are MuJoCo's, as JAX envs


def make_config() -> system.SpreezeConfig:
    f = FLAGS
    env_id = resolve_env_id(f.game, f.env)
    family = family_of(env_id)
    values = dict(PRESETS.get(family, PRESETS["classic"]))
    values.update(common.preset_overrides(f, system.SpreezeConfig, ("off_policy",), batch_auto=True))
    if f.total_steps is not None:
        values["total_steps"] = f.total_steps
    values.setdefault("max_grad_norm", 0.0)
    values.setdefault("opt_eps", 1e-8)
    values.setdefault("critic_learning_rate", 0.0)
    if f.eval_every is not None:
        values["eval_every"] = f.eval_every
    settings = common.settings_from_flags(f, system.SpreezeConfig, "spreeze")
    settings["num_samplers"] = cli.parse_count(f.num_samplers, "num_samplers", auto=True)
    config = system.SpreezeConfig(
        env_id=env_id, algo=f.algo or "sac", **settings, **common.settings_from_flags(f, system.SpreezeConfig, "run"),
        **common.settings_from_flags(f, system.SpreezeConfig, "off_policy"),
        checkpoint_every=0, num_envs=0, **values,  # num_envs: not read
    )
    system.validate(config)
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    common.launch("spreeze", FLAGS, main, __doc__)
