"""GALA's registry entry (`systems.common.registry`): every learner's state (`systems.common.restore`'s module
docstring); the policy is one learner's x_i or the average xbar of Proposition 1."""

from systems.common.registry import SystemEntry


def _restore(run_dir: str, raw: dict):
    """`--gossip=pmap` checkpoints stack the learners on a leading axis (a multi-process run: this process's
    `n / num_processes`), `--gossip=async` ones keep a tuple of n."""
    import numpy as np  # JAX only when a run is restored

    from systems.common import restore as lib
    from systems.common.rollout import stack_host
    from systems.gala import system as gala

    config = lib.config_from_json(gala.GALAConfig, raw)
    spec, setup, state = gala.make_agent(config, gala.plan(config))
    pmap = config.gossip == "pmap"
    if pmap:
        n = config.num_learners // max(1, config.num_processes)  # learners in this process's checkpoint

        def stacked(tree):
            return stack_host(tree, n)

        target = gala.GossipState(
            params=stacked(state.params), opt_state=stacked(state.opt_state), key=stacked(state.key),
            update_step=np.zeros((), np.int32), learner_steps=np.zeros((n,), np.int32),
            inbox=tuple(stacked(state.params) for _ in range(config.num_peers)),
        )
    else:
        n = config.num_learners
        target = gala.GossipState(
            params=tuple(state.params for _ in range(n)), opt_state=tuple(state.opt_state for _ in range(n)),
            key=tuple(state.key for _ in range(n)), update_step=np.zeros((), np.int32),
            learner_steps=np.zeros((n,), np.int32), inbox=(),
        )
    restored, meta, path = lib.restore_into(run_dir, gala.SYSTEM, target)
    return lib.RestoredRun(
        run_dir=run_dir, system=gala.SYSTEM, config=config, spec=spec, state=restored, meta=meta,
        checkpoint_path=path, eval_seed=setup.eval_seed, num_learners=n,
        _policy_params=lambda state, learner: _learner_params(state, learner, n, pmap),
        _make_act=lib.on_policy_act(setup.network),
    )


def _learner_params(state, learner: str, n: int, pmap: bool):
    """Learner `learner`'s parameters x_i, or (`restore.MEAN_LEARNER`) their average xbar in float64, cast back."""
    import jax
    import numpy as np

    from systems.common import restore as lib

    if learner == lib.MEAN_LEARNER:
        if pmap:
            return jax.tree.map(lambda x: np.mean(np.asarray(x, np.float64), axis=0).astype(x.dtype), state.params)
        return jax.tree.map(
            lambda *xs: np.mean(np.stack([np.asarray(x, np.float64) for x in xs]), axis=0).astype(xs[0].dtype),
            *state.params,
        )
    try:
        index = int(learner)
    except ValueError:
        raise lib.ConfigError(
            f"--eval_learner must be a learner index or '{lib.MEAN_LEARNER}', got '{learner}'"
        ) from None
    if not 0 <= index < n:
        raise lib.ConfigError(f"--eval_learner={index}: the checkpoint holds learners 0..{n - 1}")
    if pmap:
        return jax.tree.map(lambda x: np.asarray(x)[index], state.params)
    return state.params[index]


def _config() -> type:
    from systems.gala.config import GALAConfig

    return GALAConfig


ENTRY = SystemEntry(name="gala", launcher="gala", restore=_restore,
                    config_class=_config, algos=("a2c",),
                    flag_groups=(("run", "run"), ("A2C", "on_policy_without_num_envs"), ("scale-out", "scale_out"),
                                 ("GALA", "fields:gala"), ("recurrent policy", "fields:recurrent")))
