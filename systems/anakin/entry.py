"""Anakin's registry entry (`systems.common.registry`): each agent's run directory restores into one `TrainState`."""

from systems.common.registry import MULTI_HOST_SECTION, SystemEntry


def _restore(run_dir: str, raw: dict):
    from systems.anakin.config import AnakinConfig
    from systems.common.learner import build
    from systems.common.restore import restore_train_state  # JAX only when a run is restored

    return restore_train_state(run_dir, raw, "anakin", AnakinConfig, build)


def _config() -> type:
    from systems.anakin.config import AnakinConfig

    return AnakinConfig


ENTRY = SystemEntry(name="anakin", launcher="anakin", restore=_restore,
                    config_class=_config, algos=("ppo", "a2c"),
                    flag_groups=(("run", "run"), ("PPO / A2C", "on_policy"), ("PPO only", "ppo"),
                                 ("observation and reward normalization (one device)", "normalization"),
                                 ("recurrent policy", "fields:recurrent"),
                                 ("Anakin: agents, chunks and devices", "fields:anakin"),
                                 (MULTI_HOST_SECTION, "multi_host")))
