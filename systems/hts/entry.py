"""HTS-RL's registry entry (`systems.common.registry`): runs restore into one `TrainState`."""

from systems.common.registry import SystemEntry


def _restore(run_dir: str, raw: dict):
    from systems.common.restore import restore_train_state  # JAX only when a run is restored
    from systems.hts.system import HTSConfig

    return restore_train_state(run_dir, raw, "hts", HTSConfig)


ENTRY = SystemEntry(name="hts", launcher="hts", restore=_restore)
