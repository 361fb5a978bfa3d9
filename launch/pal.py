"""`python -m launch.pal --env=LunarLander-v2`: PAL (seed 003), parallel actor and learner threads around a shared
prioritized replay buffer on a K-ary sum tree, with `--algo` one of dqn (default), ddqn, ddpg, td3, sac.

Flags (`--help` lists them with their defaults): the run group, the off-policy group shared with launch.spreeze,
and PAL's actors, learners and replay (`launch.flagsets`); an on-policy flag (--num_envs, --sync_interval, ...) is
refused with one line. Defaults by task family and algorithm are `systems.offpolicy.presets`' (sources in its
comments); any flag given on the command line wins.
"""

from launch import cli

cli.exit_at_once_on_signals()  # before the heavy imports below

from envs.factory import family_of, resolve_env_id  # noqa: E402
from launch import common, flagsets  # noqa: E402
from systems.offpolicy import presets  # noqa: E402
from systems.pal import system  # noqa: E402

FLAGS = flagsets.flag_values("pal")

# PAL's own preset fields beyond the off-policy and DQN groups, set from their flags when given.
_PAL_PRESET_FIELDS = ("total_steps", "envs_per_actor", "update_interval")


def make_config() -> system.PALConfig:
    f = FLAGS
    env_id = resolve_env_id(f.game, f.env)
    algo = f.algo or "dqn"
    family = family_of(env_id)
    values, fallbacks = presets.pal_preset(env_id, family, algo, f.replay)
    values.update(common.preset_overrides(f, system.PALConfig, ("off_policy", "dqn")))
    values.update({name: f[name].value for name in _PAL_PRESET_FIELDS if f[name].value is not None})
    values = {**fallbacks, **values}
    values.update(common.run_schedule(f, values["total_steps"]))
    num_actors = f.num_actors or 1
    config = system.PALConfig(
        env_id=env_id, algo=algo, num_actors=num_actors, **common.settings_from_flags(f, system.PALConfig, "run"),
        num_envs=0, num_learners=1 if f.num_learners is None else f.num_learners,  # num_envs: the plan's
        **common.settings_from_flags(f, system.PALConfig, "pal"),
        **common.settings_from_flags(f, system.PALConfig, "dqn"),
        **common.settings_from_flags(f, system.PALConfig, "pal_run"),
        **common.settings_from_flags(f, system.PALConfig, "off_policy"), **values,
    )
    system.validate(config)
    return config


def main(argv):
    del argv
    common.run_main(system.run, make_config)


if __name__ == "__main__":
    common.launch("pal", FLAGS, main, __doc__)
