"""The update compiled in the background (`systems.common.learner.compile_in_background`) is the program the first
real update runs: the example arguments the systems build (round shapes, replay layouts) match the real arguments
in shape, dtype and weak type, so the first update lowers nothing new. A mismatch would not fail a run; it would
silently compile the whole update a second time (tens of seconds for Atari PPO on 2 cores)."""

import collections
import contextlib
import threading
import time

import jax
import numpy as np
import pytest

from envs.factory import make_spec
from systems.common.concurrency import ParameterStore, ThreadGroup
from systems.common.config import TrainConfig
from systems.common.learner import build, compile_in_background, compiles_in_progress
from systems.common.rollout import RoundStorage
from systems.offpolicy.agent import build_agent
from systems.pal.actors import RatioGate
from systems.pal.config import PALConfig
from systems.pal.learner import ParameterServer
from systems.pal.system import make_buffer

_LOWERING = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_lowered: collections.Counter = collections.Counter()
_counting = [False]


def _listener(event, duration, **kwargs):
    if _counting[0] and event == _LOWERING:
        _lowered.update([kwargs.get("fun_name")])


jax.monitoring.register_event_duration_secs_listener(_listener)


@contextlib.contextmanager
def _count_lowerings():
    _lowered.clear()
    _counting[0] = True
    try:
        yield _lowered
    finally:
        _counting[0] = False


@pytest.mark.parametrize("algo", ["a2c", "ppo"])
def test_on_policy_update_compiled_ahead_is_the_one_the_first_update_runs(algo):
    config = TrainConfig(env_id="CartPole-v1", algo=algo, num_envs=4, sync_interval=8, num_minibatches=2)
    spec = make_spec(config.env_id)
    setup, state = build(config, spec)
    storage = RoundStorage(config.sync_interval, config.num_envs, spec.obs_shape, spec.obs_dtype,
                           setup.action_shape, setup.action_dtype)
    wait = compile_in_background(setup.update, state, state.params, storage.rollout_shapes())
    wait()
    assert compiles_in_progress() == 0
    rollout = storage.to_rollout()  # host-to-device conversions lower tiny programs of their own ("stage")
    with _count_lowerings() as lowered:
        new_state, _ = setup.update(state, state.params, rollout)
        jax.block_until_ready(new_state)
    assert not lowered, dict(lowered)


def test_pal_update_compiled_ahead_is_the_one_the_server_runs():
    config = PALConfig(env_id="CartPole-v1", algo="dqn", num_actors=1, envs_per_actor=2, num_envs=2, num_learners=2,
                       batch_size=32, buffer_size=1_000, learning_starts=0, hidden_sizes=(16,), quiet=True)
    spec = make_spec(config.env_id)
    agent = build_agent(config, spec)
    buffer = make_buffer(config, agent, spec=spec)
    rows = 64
    buffer.insert({name: np.repeat(np.asarray(value)[None], rows, axis=0) for name, value in agent.example.items()})
    gate = RatioGate(update_interval=0, warmup=0, collected=rows, updates=0, total_steps=2**62)
    store = ParameterStore(agent.policy_params(agent.initial_state.agent))
    server = ParameterServer(config, config.num_learners, agent, agent.initial_state, buffer, store, gate,
                             ThreadGroup(), None, [])
    server.compile_update_ahead()
    server._wait_for_compile()  # what server_loop calls before its first step
    samples = [buffer.sample(server.sub_batch) for _ in range(config.num_learners)]
    batch = {name: np.stack([s.batch[name] for s in samples]) for name in samples[0].batch}  # as server_loop does
    weights = np.stack([s.weights for s in samples])
    with _count_lowerings() as lowered:
        jax.block_until_ready(agent.update(server.state, batch, weights))
    # Host batches go through tiny conversion programs ("stage") on their way in; no second update.
    assert not [name for name in lowered if "update" in name], dict(lowered)


def test_thread_group_stop_waits_for_a_worker_busy_past_the_timeout():
    """A worker inside an uninterruptible call (an XLA update) is joined, not left running: a daemon thread inside
    XLA at interpreter exit aborts the process (Breakout, 64 envs, stopped by --time_limit on a CPU)."""
    group = ThreadGroup()
    released = threading.Event()
    group.spawn("learner", lambda: released.wait(0.5))  # ignores `stopping`, as an update in progress does
    told = []
    group.stop(timeout=0.05, waiting=told.append)
    assert told == [["learner"]]
    assert not group.running()


def test_a_stop_inside_a_held_block_is_raised_when_it_ends():
    """Anakin's program call and its rounds' hand-over: the work finishes, then the launcher's stop is raised."""
    import os
    import signal

    from systems.common.concurrency import stops_held

    class Stop(KeyboardInterrupt):
        pass

    def launcher_handler(signum, frame):
        raise Stop

    previous = signal.signal(signal.SIGTERM, launcher_handler)
    done = []
    try:
        with pytest.raises(Stop):
            with stops_held():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # the handler runs here, in the main thread, and is held
                done.append("rounds handed over")
        assert done == ["rounds handed over"]
        assert signal.getsignal(signal.SIGTERM) is launcher_handler  # restored
    finally:
        signal.signal(signal.SIGTERM, previous)
