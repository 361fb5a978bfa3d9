"""HTS-RL's registry entry (`systems.common.registry`): runs restore into one `TrainState`."""

from systems.common.registry import MULTI_HOST_SECTION, SystemEntry


def _restore(run_dir: str, raw: dict):
    from systems.common.restore import restore_train_state  # JAX only when a run is restored
    from systems.hts.system import HTSConfig, make_agent

    return restore_train_state(run_dir, raw, "hts", HTSConfig, make_agent)


def _config() -> type:
    from systems.hts.config import HTSConfig

    return HTSConfig


ENTRY = SystemEntry(name="hts", launcher="hts", restore=_restore,
                    config_class=_config, algos=("ppo", "a2c"),
                    flag_groups=(("run", "run"), ("PPO / A2C", "on_policy"), ("PPO only", "ppo"),
                                 ("observation and reward normalization", "normalization"),
                                 ("recurrent policy", "fields:recurrent"),
                                 ("HTS-RL actors and batches", "fields:hts"), ("devices", "fields:hts_devices"),
                                 (MULTI_HOST_SECTION, "multi_host")))
