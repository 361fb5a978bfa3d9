"""Builds the agent pieces a system needs from a `TrainConfig`: network, optimizer, initial `TrainState`, the
jitted update `update(state, behaviour_params, rollout) -> (state, metrics)` and the actors' policy function."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from agents import (
    A2CConfig,
    ActorCritic,
    PPOConfig,
    TrainState,
    a2c_update,
    make_network,
    make_optimizer,
    ppo_update,
)
from agents.hyperparams import field_names
from agents.normalization import (
    OBS_NORM,
    REWARD_NORM,
    NormalizationConfig,
    NormalizedNetwork,
    normalized_update,
    trainable,
)
from agents.recurrent import RecurrentActorCritic, init_inputs, memory_of, recurrent_network, sequence_apply
from envs.factory import EnvSpec
from systems.common import config as config_lib
from systems.common import conv_tuning
from systems.common.jit_cache import made_once
from systems.common.rollout import make_policy_fn

# Stream names for jax.random.fold_in on the run key: one independent key per purpose.
_INIT, _LEARNER, _ACTIONS, _EVAL = 0, 1, 2, 3


@dataclasses.dataclass
class LearnerSetup:
    network: ActorCritic
    update: Callable  # jitted (state, behaviour_params, rollout) -> (state, metrics)
    update_fn: Callable  # the same update before jit, for systems that pmap it (keyword `axis_name` for A2C)
    policy: Callable  # jitted (params, obs, env_ids, env_steps, run_key) -> (actions, log_probs, values)
    action_key: jax.Array  # the run key that action keys are folded from
    eval_seed: int
    action_shape: tuple
    action_dtype: Any
    # seed -> the TrainState `build` makes for that seed (one compiled initializer for every seed: Anakin's agents)
    initial_state: Callable[[int], TrainState] | None = None
    carry_size: int = 0  # S of a recurrent policy's per-env state (`agents.recurrent`); 0: feed-forward
    key_hold: int = 1  # consecutive steps of an env that share an action key (gSDE's `sde_sample_freq`)


def action_key(seed: int) -> jax.Array:
    """The run key of `seed` that action keys are folded from (`LearnerSetup.action_key`)."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), _ACTIONS)


def eval_seed(seed: int) -> int:
    """The evaluation envs' base seed of a run of `seed` (`LearnerSetup.eval_seed`)."""
    return seed + 10_000


def build(
    config: config_lib.TrainConfig,
    spec: EnvSpec,
    *,
    network: ActorCritic | None = None,
    optimizer_settings: dict | None = None,
    optimizer: optax.GradientTransformation | None = None,
    update: functools.partial | None = None,
) -> tuple[LearnerSetup, TrainState]:
    """The agent of `config` from its parts: the `network` (default `default_network`), the optimizer
    (`optimizer_settings`, `agents.optim.make_optimizer`'s arguments, default `default_optimizer_settings(config)`;
    or an `optimizer` that function cannot build: Anakin's swept rates) and the `update` rule with its hyperparameters
    (`functools.partial(agents.ppo_update or agents.a2c_update, config=...)`, default `algo_update`), to which
    `build` gives the network's `apply_fn` and the optimizer. The programs are made once per process for an equal
    network, optimizer settings and update (`jit_cache`); for an `optimizer`, once per call.

    With `--normalize_obs` / `--normalize_reward` the network is wrapped (`agents.normalization`): its variables
    carry the running statistics beside `params`, the optimizer sees `params` only, and the update normalizes each
    round with its behaviour statistics and merges the round into the learner's, in round order.
    """
    if network is None:
        network = default_network(config, spec)
    norm = normalization_config(config, spec)
    memory = memory_of(network)
    recurrent = memory is not None
    raw_network = network  # the normalized update feeds the raw network normalized observations
    if norm.enabled:
        network = NormalizedNetwork(network, norm, obs_shape=spec.obs_shape, num_envs=config.num_envs)
    if optimizer is not None and optimizer_settings is not None:
        raise ValueError("build takes an optimizer or its settings, not both")
    optimizer_key = None  # an optimizer passed in cannot be compared
    if optimizer is None:
        settings = default_optimizer_settings(config) if optimizer_settings is None else optimizer_settings
        optimizer, optimizer_key = make_optimizer(**settings), tuple(sorted(settings.items()))
    initial_state = initial_state_fn(network, optimizer, spec, optimizer_key)
    state = initial_state(config.seed)
    if update is None:
        update = algo_update(config, spec)
    apply_fn = sequence_apply(raw_network) if recurrent else raw_network.apply  # a recurrent one re-runs sequences
    update = functools.partial(update, apply_fn=apply_fn, optimizer=optimizer)
    # What the update closes over.
    update_key = None if optimizer_key is None else (
        "update", raw_network, optimizer_key, norm, update.func, update.keywords["config"])
    if norm.enabled:
        update = normalized_update(update, norm)
    action_shape, action_dtype = action_layout(spec)
    hold = config.key_hold(config.sync_interval)
    setup = LearnerSetup(
        network=network,
        update=jax.jit(update) if update_key is None else made_once(update_key, lambda: jax.jit(update)),
        update_fn=update,
        policy=made_once(("policy", network, hold), lambda: make_policy_fn(network.apply, recurrent, hold)),
        action_key=action_key(config.seed),
        eval_seed=eval_seed(config.seed),
        action_shape=action_shape,
        action_dtype=action_dtype,
        initial_state=initial_state,
        carry_size=memory.carry_size if recurrent else 0,
        key_hold=hold,
    )
    return setup, state


def action_layout(spec: EnvSpec) -> tuple:
    """(shape, dtype) of one action of `spec`: float32 [A] (continuous), int32 [K] (factored) or an int32 scalar."""
    if spec.continuous:
        return (spec.action_dim,), np.float32
    return ((spec.action_dim,) if spec.factored else ()), np.int32


def network_of(config: config_lib.TrainConfig, spec: EnvSpec, **overrides) -> ActorCritic:
    """`agents.make_network` of `spec` with the config's network hyperparameters (and `overrides`: BA3C's torso);
    ConfigError with one line for a choice the task cannot take (`--use_sde` on discrete actions)."""
    try:
        return make_network(spec.obs_shape, spec.action_dim, spec.continuous, **config.network_settings(),
                            action_nvec=spec.action_nvec, image_shape=spec.obs_image_shape, **overrides)
    except ValueError as error:
        raise config_lib.ConfigError(f"{config.env_id}: {error}") from None


def default_network(config: config_lib.TrainConfig, spec: EnvSpec) -> ActorCritic:
    """The on-policy actor-critic of `spec` (`network_of`: the family's torso, `--hidden_sizes`' MLP) with
    the convolution plan `--conv_plan` picks for the learner's batch (`conv_tuning.with_plan`)."""
    network = network_of(config, spec)
    return with_memory(conv_tuning.with_plan(network, spec.obs_shape, learner_batch(config), config.conv_plan),
                       config)


def with_memory(network: ActorCritic, config: config_lib.TrainConfig) -> ActorCritic | RecurrentActorCritic:
    """`network`, or with `--recurrent` its torso and heads around an LSTM or GRU core of `--rnn_size` units
    (`agents.recurrent.recurrent_network`); ConfigError where no core can read the torso (a Dict observation)."""
    if config.recurrent == "none":
        return network
    try:
        return recurrent_network(network, config.recurrent, config.rnn_size, config.rnn_input)
    except ValueError as error:
        raise config_lib.ConfigError(f"--recurrent={config.recurrent}: {error}") from None


def learner_batch(config: config_lib.TrainConfig) -> int:
    """Frames in one gradient of the update: a PPO minibatch, or A2C's whole round."""
    frames = config.num_envs * config.sync_interval
    return frames // config.num_minibatches if config.algo == "ppo" else frames


def default_optimizer_settings(config: config_lib.TrainConfig) -> dict:
    """`make_optimizer`'s arguments for `config`."""
    return config.optimizer_settings(config_lib.total_rounds(config) * optimizer_steps_per_update(config))


def initial_state_fn(
    network: ActorCritic, optimizer: optax.GradientTransformation, spec: EnvSpec, optimizer_key: Hashable | None
) -> Callable[[int], TrainState]:
    """seed -> the TrainState of a run of that seed: the parameters initialized from its run key's `_INIT` stream,
    the learner's key chain starting at `_LEARNER`.

    One program for the initializers and the optimizer's state (run eagerly, each orthogonal init and each optimizer
    leaf's zeros compiled a program of its own: seconds per process, the same values), made once per process for an
    equal network and `optimizer_key` (the optimizer's settings; None: made for this call)."""
    obs_shape, obs_dtype = (1, *spec.obs_shape), jax.dtypes.canonicalize_dtype(spec.obs_dtype)

    def state_of_run_key(run_key: jax.Array) -> TrainState:
        obs = jnp.zeros(obs_shape, obs_dtype)
        memory = memory_of(network)
        inputs = (obs,) if memory is None else init_inputs(memory, obs)
        params = network.init(jax.random.fold_in(run_key, _INIT), *inputs)
        return TrainState(
            params=params,
            opt_state=optimizer.init(trainable(params)),
            key=jax.random.fold_in(run_key, _LEARNER),
            update_step=jnp.zeros((), jnp.int32),
        )

    state_of = jax.jit(state_of_run_key) if optimizer_key is None else made_once(
        ("initial_state", network, obs_shape, obs_dtype, optimizer_key), lambda: jax.jit(state_of_run_key))

    def initial_state(seed: int) -> TrainState:
        return state_of(jax.random.PRNGKey(seed))

    return initial_state


def algo_update(config: config_lib.TrainConfig, spec: EnvSpec) -> functools.partial:
    """`--algo`'s update rule with its hyperparameters (`build`'s `update`): `agents.a2c_update` with an
    `A2CConfig`, or `agents.ppo_update` with a `PPOConfig` whose loops are built by `ppo_loop_plan`."""
    if config.algo == "a2c":
        return functools.partial(a2c_update, config=algo_config(config))
    loop_plan = ppo_loop_plan(spec.obs_shape, config.num_epochs, config.num_minibatches)
    return functools.partial(ppo_update, config=algo_config(config, **loop_plan))


# How PPO's loops are built: chosen per network kind and backend (`ppo_loop_plan`), not a hyperparameter.
_PPO_BUILD_FIELDS = ("unroll_epochs", "unroll_minibatches")


def algo_config(config: config_lib.TrainConfig, **build) -> A2CConfig | PPOConfig:
    """`--algo`'s hyperparameters (`agents.A2CConfig` or `agents.PPOConfig`), each read from the run config's field
    of the same name: a hyperparameter is one `TrainConfig` field that the algorithm's config names, never copied
    by hand. `build` gives PPO's loop forms (`_PPO_BUILD_FIELDS`)."""
    algo_cls = A2CConfig if config.algo == "a2c" else PPOConfig
    names = [name for name in field_names(algo_cls) if name not in _PPO_BUILD_FIELDS]
    return algo_cls(**{name: getattr(config, name) for name in names}, **build)


def normalization_config(config: config_lib.TrainConfig, spec: EnvSpec) -> NormalizationConfig:
    """The run's normalizations; ConfigError where they cannot apply (image observations)."""
    if config.normalize_obs and (len(spec.obs_shape) != 1 or spec.obs_image_shape):
        raise config_lib.ConfigError(
            f"--normalize_obs applies to vector observations; {config.env_id} observes images "
            f"{spec.obs_image_shape or spec.obs_shape}"
        )
    return NormalizationConfig(**{name: getattr(config, name) for name in field_names(NormalizationConfig)})


# Convolutional PPO updates with more optimizer steps than this keep the epoch loop rolled: the fully unrolled
# Nature CNN update's build time and memory grow with its steps (`benchmarks/presets.py` measures them).
MAX_UNROLLED_CONV_STEPS = 32


def ppo_loop_plan(obs_shape: tuple, num_epochs: int, num_minibatches: int, backend: str | None = None) -> dict:
    """How PPO's epoch and minibatch loops are built, by network kind and backend (`PPOConfig.unroll_epochs`).

    On a CPU (`benchmarks/presets.py` times both): convolutional torsos fully unrolled (the Nature CNN's update
    runs several times faster than rolled); MLPs rolled (they build in seconds and run as fast as unrolled ones).
    Convolutional updates with more than `MAX_UNROLLED_CONV_STEPS` optimizer steps would grow without bound
    unrolled: they keep the epochs rolled (slower per step, bounded to build) and unroll at most that many
    minibatches. Unrolling is XLA CPU's remedy for
    its own convolutions: other backends (`backend`, default JAX's) keep every loop rolled (on a GPU the rolled Atari
    update builds several times faster and runs as fast: `benchmarks/gpu_check.sh`), and so does MinAtar's CNN, whose
    CPU convolution is im2col slices (rolled, Anakin's agents compile in half the time and run as fast).
    """
    if (backend or jax.default_backend()) != "cpu" or not _runs_xla_cpu_convolutions(obs_shape):
        return dict(unroll_epochs=False, unroll_minibatches=False)
    if num_epochs * num_minibatches <= MAX_UNROLLED_CONV_STEPS:
        return dict(unroll_epochs=True, unroll_minibatches=True)
    return dict(unroll_epochs=False, unroll_minibatches=num_minibatches <= MAX_UNROLLED_CONV_STEPS)


def _runs_xla_cpu_convolutions(obs_shape: tuple) -> bool:
    """The default network of `obs_shape` runs XLA's convolutions on a CPU (every CNN but MinAtar's)."""
    if len(obs_shape) == 1:
        return False
    try:
        return make_network(obs_shape, 1, False).torso != "minatar_cnn"
    except ValueError:  # no network reads it: the run is refused before any update is built
        return False


def optimizer_steps_per_update(config: config_lib.TrainConfig) -> int:
    """PPO steps the optimizer once per minibatch, A2C once per round: the decay horizon counts optimizer steps."""
    return config.num_epochs * config.num_minibatches if config.algo == "ppo" else 1


_COMPILE_THREAD = "compile-ahead"


def compiles_in_progress() -> int:
    """Background compiles (`compile_in_background`) still running: the process waits for them at exit."""
    return sum(1 for t in threading.enumerate() if t.name == _COMPILE_THREAD and t.is_alive())


def wait_for_compiles() -> None:
    """Joins every background compile (`compile_in_background`) still running."""
    for thread in threading.enumerate():
        if thread.name == _COMPILE_THREAD:
            thread.join()


def compile_in_background(jitted: Callable, *example_args: Any) -> Callable[[], None]:
    """Starts compiling `jitted` (a `jax.jit` or `jax.pmap` function) for `example_args` (arrays or
    `jax.ShapeDtypeStruct`s) in a background thread, so the compile overlaps the collection of the first round;
    returns `wait`, to call before every call of `jitted` (instant once the compile is done), so the two never
    compile the same program at once. On a small CPU machine the Atari and GFootball PPO updates compile for tens
    of seconds.

    jax caches what `jitted.lower(...).compile()` builds for the function's later calls with the same argument
    types (checked with `jax_log_compiles`: the first update then compiles nothing). A failure here is left to the
    first real call, which compiles again and raises it where the run handles errors."""

    def compile_now():
        try:
            jitted.lower(*example_args).compile()
        except Exception:  # the first real call compiles again and reports it
            pass

    # Not a daemon: the interpreter waits for it at exit. A run stopped during the compile (Ctrl-C, an error) must
    # not tear XLA down under a compiling thread (the process aborted with SIGABRT when it did).
    thread = threading.Thread(target=compile_now, name=_COMPILE_THREAD, daemon=False)
    thread.start()
    return thread.join


def parameter_count(params: Any) -> int:
    """Trained parameters (the running statistics beside `params` in normalized variables are not counted)."""
    if isinstance(params, dict) and "params" in params and set(params) <= {"params", OBS_NORM, REWARD_NORM}:
        params = params["params"]
    return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))
