"""Distributed BA3C's registry entry (`systems.common.registry`): runs restore into one `TrainState` (the replicas
are identical; one copy is saved)."""

from systems.common.registry import SystemEntry


def _restore(run_dir: str, raw: dict):
    """BA3C: the BA3C torso of width `hidden` on Atari and the optimizer, as `systems.ba3c.run` builds them. The
    plan is that of one device: only the optimizer state's structure matters here, not its rates."""
    from systems.ba3c import system as ba3c
    from systems.common import restore as lib  # JAX only when a run is restored

    config = lib.config_from_json(ba3c.BA3CConfig, raw)
    spec, setup, target = ba3c.make_agent(config, ba3c.plan(config, num_global_devices=1))
    state, meta, path = lib.restore_into(run_dir, ba3c.SYSTEM, target)
    return lib.RestoredRun(
        run_dir=run_dir, system=ba3c.SYSTEM, config=config, spec=spec, state=state, meta=meta,
        checkpoint_path=path, eval_seed=setup.eval_seed, num_learners=1, _policy_params=lib.single_params,
        _make_act=lib.on_policy_act(setup.network),
    )


def _config() -> type:
    from systems.ba3c.config import BA3CConfig

    return BA3CConfig


ENTRY = SystemEntry(name="ba3c", launcher="ba3c", restore=_restore,
                    config_class=_config, algos=("a2c",),
                    flag_groups=(("run", "run"), ("A2C", "on_policy_without_num_envs"), ("scale-out", "scale_out"),
                                 ("BA3C", "fields:ba3c"), ("recurrent policy", "fields:recurrent")))
