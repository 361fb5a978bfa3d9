"""The test suite's shared helpers, in one module so that no test file keeps its own copy.

* Running a training launcher in the test process as its command line would (`run_launcher`): the keyword values
  become `--name=value` flags (`as_flag`) parsed by the launcher's own parser (`launch.cli.launcher_parser`, so a bad
  flag exits 2 with one line as on the command line), then its `main` runs. The launcher's flags are reset afterwards.
* Reading what a run wrote: `read_summary` (summary.json) and `read_config` (config.json).
* Small run configs, one per system, that finish in seconds on the 2-core machine: `tiny_hts`, `tiny_pal`,
  `tiny_spreeze`. A test passes the fields it needs changed; the system modules are imported on first call.
* A random rollout of an actor-critic, as the actors write one (`random_rollout`)."""

from __future__ import annotations

import json
import os
import sys

from launch import cli

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: a launcher's cwd


def as_flag(name: str, value) -> str:
    if value is True:
        return f"--{name}"
    if value is False:
        return f"--no{name}"
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return f"--{name}={value}"


def run_launcher(main, **values) -> None:
    """`main`: a launcher's `main` (e.g. `launch.hts.main`); `values`: its flags."""
    module = sys.modules[main.__module__]
    name = module.__name__.rpartition(".")[2]
    flag_values = module.FLAGS
    argv = [module.__name__] + [as_flag(key, value) for key, value in values.items()]
    flag_values.unparse_flags()
    try:
        cli.launcher_parser(name, flag_values, module.__doc__)(argv)
        main([])
    finally:
        flag_values.unparse_flags()


def launcher_config(launcher_module, *argv):
    """The config a launcher's command line (`argv`: its flags) gives, without running it."""
    flag_values = launcher_module.FLAGS
    name = launcher_module.__name__.rpartition(".")[2]
    flag_values.unparse_flags()
    try:
        cli.launcher_parser(name, flag_values, launcher_module.__doc__)([launcher_module.__name__, *argv])
        return launcher_module.make_config()
    finally:
        flag_values.unparse_flags()


def read_summary(run_dir) -> dict:
    """The run's summary.json (FileNotFoundError when the run wrote none)."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def read_config(run_dir) -> dict:
    """The run's config.json (FileNotFoundError when the run wrote none)."""
    with open(os.path.join(run_dir, "config.json")) as f:
        return json.load(f)


def assert_profile(summary: dict, roles: set[str]) -> None:
    """summary.json's per-stage profile has exactly `roles`, each with non-negative shares adding up to one, names
    a bound, and the hardware card is beside it."""
    import pytest

    profile = summary["profile"]
    assert set(profile["roles"]) == roles, profile["roles"]
    for role, entry in profile["roles"].items():
        shares = entry["shares"]
        assert entry["threads"] >= 1 and min(shares.values()) >= 0, role
        assert sum(shares.values()) == pytest.approx(1.0), role
    assert profile["bound"]["verdict"].endswith("-bound") and profile["bound"]["role"] in roles
    assert summary["hardware"]["cores"] >= 1 and summary["hardware"]["versions"]["jax"]


def random_rollout(net, params, rng, steps: int, envs: int, *, obs_dim: int = 4, key_seed: int = 7,
                   termination_rate: float = 0.2):
    """An `agents.Rollout` of `steps` x `envs`: observations and rewards drawn from `rng`'s normal, terminations with
    probability `termination_rate`, no truncation, every step valid; actions, log-probs and values from `params`, as
    the actors write them (keys split from `key_seed`). The policy is jitted whole: run op by op, each of its ops
    would compile on its own."""
    import functools

    import jax
    import jax.numpy as jnp

    import agents

    obs = jnp.asarray(rng.normal(size=(steps + 1, envs, obs_dim)), jnp.float32)
    keys = jax.random.split(jax.random.key(key_seed), steps * envs).reshape(steps, envs)
    actions, log_probs, values = jax.jit(jax.vmap(
        functools.partial(agents.policy_step, apply_fn=net.apply), in_axes=(None, 0, 0)
    ))(params, obs[:-1], keys)
    return agents.Rollout(
        obs=obs,
        actions=actions,
        rewards=jnp.asarray(rng.normal(size=(steps, envs)), jnp.float32),
        terminations=jnp.asarray(rng.random((steps, envs)) < termination_rate, jnp.float32),
        truncations=jnp.zeros((steps, envs), jnp.float32),
        valid=jnp.ones((steps, envs), jnp.float32),
        behaviour_log_probs=log_probs,
        behaviour_values=values,
    )


def tiny_hts(logdir, **overrides):
    """An HTSConfig for a few PPO rounds on CartPole (6 rounds of 4 envs x 16 steps, a checkpoint every round, an
    evaluation of 2 episodes every 2 rounds) writing to `logdir`; `overrides` replace any field."""
    from systems.hts.system import HTSConfig

    values = dict(env_id="CartPole-v1", num_envs=4, sync_interval=16, total_steps=6 * 64, num_epochs=1,
                  num_minibatches=2, checkpoint_every=64, eval_every=128, eval_episodes=2, quiet=True,
                  logdir=str(logdir))
    values.update(overrides)
    return HTSConfig(**values)


def tiny_pal(logdir, **overrides):
    """A PALConfig for 1,000 steps of DQN with prioritized replay on CartPole (2 actors x 2 envs, 2 learners)
    writing to `logdir`; `overrides` replace any field. `num_envs` is derived: actors x envs per actor."""
    from systems.pal.config import PALConfig

    values = dict(
        env_id="CartPole-v1", algo="dqn", seed=3, num_actors=2, envs_per_actor=2, num_learners=2, batch_size=32,
        update_interval=2.0, buffer_size=2_000, learning_starts=200, total_steps=1_000, hidden_sizes=(32,),
        target_update_period=50, eval_episodes=2, eval_every=500, checkpoint_every=500, logdir=str(logdir),
        quiet=True, learning_rate=1e-3, max_grad_norm=10.0,
    )
    values.update(overrides)
    values["num_envs"] = values["num_actors"] * values["envs_per_actor"]
    return PALConfig(**values)


def tiny_spreeze(logdir, **overrides):
    """A SpreezeConfig for 1,500 steps of SAC on Pendulum (2 sampler processes of 1 env) writing to `logdir`;
    `overrides` replace any field. `num_envs` is derived: samplers x envs per sampler."""
    from systems.spreeze.system import SpreezeConfig

    values = dict(
        env_id="Pendulum-v1", algo="sac", seed=2, num_samplers=2, envs_per_sampler=1, batch_size=32,
        buffer_size=5_000, learning_starts=200, total_steps=1_500, hidden_sizes=(16,), publish_every=20,
        eval_episodes=2, eval_every=500, logdir=str(logdir), quiet=True, learning_rate=1e-3, max_grad_norm=0.0,
        opt_eps=1e-8, tau=0.005,
    )
    values.update(overrides)
    values["num_envs"] = values["num_samplers"] * values["envs_per_sampler"]
    return SpreezeConfig(**values)
