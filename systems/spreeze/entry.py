"""Spreeze's registry entry (`systems.common.registry`): its weight files are its checkpoints."""

from systems.common.registry import SystemEntry


def _weights_dir(run_dir: str) -> str:
    from systems.common.checkpoint import checkpoint_dir

    return checkpoint_dir(run_dir)


def _checkpoint_files(run_dir: str) -> list[str]:
    from systems.spreeze import weights as weights_lib

    return [path for _, path in weights_lib.list_versions(_weights_dir(run_dir))]


def _load(run_dir, target, on_skip):
    from systems.spreeze import weights as weights_lib

    loaded = weights_lib.load_latest(_weights_dir(run_dir), target, on_skip)
    if loaded is None:
        return None
    version, payload, meta = loaded
    return payload, meta, weights_lib.weights_path(_weights_dir(run_dir), version)


def _restore(run_dir: str, raw: dict):
    from systems.offpolicy.restore import restore_off_policy  # JAX only when a run is restored
    from systems.spreeze.system import SpreezeConfig

    return restore_off_policy(run_dir, raw, "spreeze", SpreezeConfig, _load)


def _config() -> type:
    from systems.spreeze.config import SpreezeConfig

    return SpreezeConfig


ENTRY = SystemEntry(name="spreeze", launcher="spreeze", restore=_restore, checkpoint_files=_checkpoint_files,
                    config_class=_config, algos=("sac", "td3", "ddpg"),
                    flag_groups=(("run", "run_without_checkpoints"), ("off-policy", "off_policy"),
                                 ("Spreeze processes", "fields:spreeze")))
