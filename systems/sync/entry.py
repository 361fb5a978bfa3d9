"""The synchronous baseline's registry entry (`systems.common.registry`): runs restore into one `TrainState`."""

from systems.common.registry import SystemEntry


def _restore(run_dir: str, raw: dict):
    from systems.common.restore import restore_train_state  # JAX only when a run is restored
    from systems.sync.system import SyncConfig, make_agent

    return restore_train_state(run_dir, raw, "sync", SyncConfig, make_agent)


def _config() -> type:
    from systems.sync.config import SyncConfig

    return SyncConfig


ENTRY = SystemEntry(name="sync", launcher="sync", restore=_restore,
                    config_class=_config, algos=("ppo", "a2c"),
                    flag_groups=(("run", "run"), ("PPO / A2C", "on_policy"), ("PPO only", "ppo"),
                                 ("observation and reward normalization", "normalization"),
                                 ("recurrent policy", "fields:recurrent")))
