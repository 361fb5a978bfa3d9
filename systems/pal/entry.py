"""PAL's registry entry (`systems.common.registry`): runs restore into a `PALState` (the replay buffer is not needed
to act)."""

from systems.common.registry import SystemEntry


def _restore(run_dir: str, raw: dict):
    from systems.offpolicy.restore import restore_off_policy  # JAX only when a run is restored
    from systems.pal.config import PALConfig

    return restore_off_policy(run_dir, raw, "pal", PALConfig)


def _config() -> type:
    from systems.pal.config import PALConfig

    return PALConfig


ENTRY = SystemEntry(name="pal", launcher="pal", restore=_restore,
                    config_class=_config, algos=("dqn", "ddqn", "ddpg", "td3", "sac"),
                    flag_groups=(("run", "run"), ("off-policy", "off_policy"),
                                 ("PAL actors, learners and replay", "fields:pal,dqn,pal_run")))
