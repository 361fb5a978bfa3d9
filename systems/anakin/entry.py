"""Anakin's registry entry (`systems.common.registry`): each agent's run directory restores into one `TrainState`."""

from systems.common.registry import SystemEntry


def _restore(run_dir: str, raw: dict):
    from systems.anakin.config import AnakinConfig
    from systems.common.restore import restore_train_state  # JAX only when a run is restored

    return restore_train_state(run_dir, raw, "anakin", AnakinConfig)


ENTRY = SystemEntry(name="anakin", launcher="anakin", restore=_restore)
