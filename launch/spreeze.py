"""`python -m launch.spreeze --env=Pendulum-v1`: Spreeze (seed 002): sampler processes writing into a shared-memory
replay, one large-batch SAC / TD3 / DDPG learner, weights by file, a test process.

Flags (`--help` lists them with their defaults): the run group (without --checkpoint_every; the weight files
published every `--publish_every` updates are the checkpoints), the off-policy group shared with launch.pal, and
Spreeze's processes (`launch.flagsets`); `--num_samplers` and `--batch_size` accept `auto` (section 3.4)."""

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from envs.factory import family_of, resolve_env_id  # noqa: E402
from launch import common, flagsets  # noqa: E402
from systems.offpolicy import presets  # noqa: E402
from systems.spreeze import system  # noqa: E402

FLAGS = flagsets.flag_values("spreeze")


def make_config() -> system.SpreezeConfig:
    f = FLAGS
    env_id = resolve_env_id(f.game, f.env)
    family = family_of(env_id)
    values = presets.spreeze_preset(family)
    values.update(common.preset_overrides(f, system.SpreezeConfig, ("off_policy",), batch_auto=True))
    if f.total_steps is not None:
        values["total_steps"] = f.total_steps
    values = {**presets.CONTINUOUS_FALLBACKS, **values}
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
