"""GALA system (seed 004): the pmap mode mixes exactly the messages sent one iteration earlier, a seed and a device
count fix a pmap run bit for bit, the consensus distance stays under the Proposition 1 bound, and the async mode
runs its learners independently. Multi-device code runs in its own process (tests/multidevice.py)."""

import csv
import json
import time

import numpy as np
import pytest

from systems.common.config import ConfigError
from systems.gala import system
from tests.multidevice import free_port, run_processes, run_python

_ONE_ITERATION_OLD = """
import functools, json
import jax, jax.numpy as jnp, numpy as np
from agents import LEARNER_AXIS, TrainState
from systems.gala.lockstep import _gossip_step

n = 4
def fake_update(state, behaviour_params, delta):  # a 'local step' that adds a known per-learner delta
    params = jax.tree.map(lambda p: p + delta, state.params)
    return state._replace(params=params, update_step=state.update_step + 1), {"update_norm": jnp.linalg.norm(delta)}

step = jax.pmap(functools.partial(_gossip_step, update_fn=fake_update, shifts=(1,), num_learners=n,
                                  with_cosine=False), axis_name=LEARNER_AXIS)
x0 = np.zeros((n, 3), np.float32)
state = TrainState(params={"w": x0}, opt_state=(), key=np.zeros((n, 2), np.uint32), update_step=np.zeros(n, np.int32))
inbox = ({"w": x0},)  # messages in transit start as the initial parameters
rng = np.random.default_rng(0)
history = []
for k in range(4):
    delta = rng.normal(size=(n, 3)).astype(np.float32)
    state, inbox, metrics, stats = step(state, delta, inbox)
    history.append({"delta": delta.tolist(), "x": np.asarray(state.params["w"]).tolist(),
                    "distance": float(np.asarray(stats["consensus_distance"])[0])})
print(json.dumps(history))
"""


def test_pmap_mode_mixes_exactly_the_messages_sent_one_iteration_earlier():
    history = json.loads(run_python(_ONE_ITERATION_OLD, num_devices=4).strip().splitlines()[-1])
    n = 4
    x = np.zeros((n, 3))
    sent = np.zeros((n, 3))  # what each learner sent last iteration (initially the initial parameters)
    for record in history:
        updated = x + np.asarray(record["delta"])
        from_in_peer = np.roll(sent, 1, axis=0)  # learner i's in-peer on the 1-peer ring is i - 1
        x = (updated + from_in_peer) / 2
        sent = updated
        np.testing.assert_allclose(np.asarray(record["x"]), x, rtol=1e-5, atol=1e-6)
        expected_distance = np.linalg.norm(x - x.mean(axis=0))
        assert record["distance"] == pytest.approx(expected_distance, rel=1e-4)


_PMAP_RUN = """
import json, sys
from systems.gala import system
config = system.GALAConfig(
    env_id="CartPole-v1", seed=5, sync_interval=5, envs_per_learner=4, num_learners=4, total_steps=4 * 20 * 30,
    eval_episodes=0, quiet=True, gossip="pmap", topology="{topology}", logdir=sys.argv[1], log_grad_cosine=True,
    {extra}
)
summary = system.run(config)
print(json.dumps({{"fingerprint": summary["param_fingerprint"], "updates": summary["updates"]}}))
"""


def _pmap_run(tmp_path, name, topology="ring", extra=""):
    code = f"import sys; sys.argv = ['x', {str(tmp_path / name)!r}]\n" + _PMAP_RUN.format(topology=topology,
                                                                                         extra=extra)
    return json.loads(run_python(code, num_devices=4).strip().splitlines()[-1])


def _progress(run_dir):
    with open(run_dir / "progress.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_pmap_runs_are_bit_reproducible_and_stay_inside_the_proposition_1_bound(tmp_path):
    first = _pmap_run(tmp_path, "a")
    second = _pmap_run(tmp_path, "b")
    assert first["updates"] == second["updates"] == 30
    assert first["fingerprint"] == second["fingerprint"]
    rows = _progress(tmp_path / "a")
    distances = np.array([float(r["consensus_distance"]) for r in rows])
    bounds = np.array([float(r["consensus_bound"]) for r in rows])
    assert np.all(distances > 0)  # the learners really differ (their envs differ) ...
    assert np.all(distances <= bounds)  # ... but stay inside the epsilon-ball of Proposition 1
    cosines = np.array([float(r["grad_cosine_mean"]) for r in rows])
    assert np.all(np.abs(cosines) <= 1.0 + 1e-6)
    with open(tmp_path / "a" / "grad_cosine.csv") as f:
        assert len(list(csv.DictReader(f))) == 30 * 16


@pytest.mark.slow
def test_pmap_exponential_graph_runs_inside_its_bound(tmp_path):
    _pmap_run(tmp_path, "exp", topology="exponential")
    rows = _progress(tmp_path / "exp")
    assert all(float(r["consensus_distance"]) <= float(r["consensus_bound"]) for r in rows)


@pytest.mark.slow
def test_a_recurrent_pmap_run_is_bit_reproducible(tmp_path):
    """An LSTM core on 4 gossiping learners: each learner's envs keep their states in the one collector, each
    learner re-runs its own envs' sequences; a seed and a device count fix the run."""
    first = _pmap_run(tmp_path, "a", extra='recurrent="lstm", rnn_size=8,')
    second = _pmap_run(tmp_path, "b", extra='recurrent="lstm", rnn_size=8,')
    assert first["updates"] == 30 and first["fingerprint"] == second["fingerprint"]


@pytest.mark.slow
@pytest.mark.parametrize("recurrent", ["none", "gru"])
def test_async_learners_run_and_mix(tmp_path, recurrent):
    config = system.GALAConfig(
        env_id="CartPole-v1", seed=5, sync_interval=5, envs_per_learner=4, num_learners=3, total_steps=3 * 20 * 20,
        eval_episodes=2, quiet=True, logdir=str(tmp_path / "async"), max_staleness=2, recurrent=recurrent, rnn_size=8,
    )
    summary = system.run(config)
    assert summary["updates"] == 60 and summary["env_steps"] == 3 * 20 * 20
    assert sum(summary["learner_iterations"]) == 60
    mixes = [g["mixes"] for g in summary["gossip"]]
    assert all(m > 0 for m in mixes)
    assert all(g["max_staleness_mixed"] <= 2 for g in summary["gossip"])
    rows = _progress(tmp_path / "async")
    assert any(r["consensus_distance"] for r in rows)


@pytest.mark.slow
def test_async_evaluations_see_the_learners_as_of_their_row(tmp_path, monkeypatch):
    """The learners run on while the main thread evaluates: each evaluation must still play the parameters of the
    env step it is logged at (every learner's iterations add up to the row's), not whatever the learners hold
    when the main thread gets to it (which logged final-policy returns at mid-run env steps)."""
    from systems.common.monitor import Monitor

    seen = []
    evaluate = Monitor.evaluate

    def slow_evaluate(self):
        seen.append((int(self.state.update_step), int(np.sum(self.state.learner_steps))))
        time.sleep(0.3)  # the learners run ahead meanwhile
        evaluate(self)

    monkeypatch.setattr(Monitor, "evaluate", slow_evaluate)
    config = system.GALAConfig(
        env_id="CartPole-v1", seed=5, sync_interval=5, envs_per_learner=4, num_learners=3, total_steps=3 * 20 * 40,
        eval_episodes=1, eval_every=3 * 20 * 4, quiet=True, logdir=str(tmp_path / "async"),
    )
    system.run(config)
    assert len(seen) >= 5
    assert all(update_step == iterations for update_step, iterations in seen), seen
    # ... and carry the time those parameters existed: the wall time of their own progress row.
    rows = {int(r["env_steps"]): float(r["wall_time"]) for r in _progress(tmp_path / "async")}
    with open(tmp_path / "async" / "evaluations.csv") as f:
        evaluations = list(csv.DictReader(f))
    assert len(evaluations) >= 5
    for evaluation in evaluations:
        assert float(evaluation["wall_time"]) == pytest.approx(rows[int(evaluation["env_steps"])], abs=1e-3)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(gossip="async", topology="exponential"), "exponential"),
        (dict(max_staleness=-3), "max_staleness"),
        (dict(num_learners=0), "num_learners"),
        (dict(num_learners=4, num_peers=4), "peer"),
        (dict(algo="ppo"), "A2C"),
    ],
)
def test_bad_gossip_settings_are_clear_errors(changes, message):
    config = system.GALAConfig(env_id="CartPole-v1", **changes)
    with pytest.raises(ConfigError, match=message):
        system.validate(config)


def test_pmap_mode_needs_one_device_per_learner(tmp_path):
    config = system.GALAConfig(env_id="CartPole-v1", gossip="pmap", num_learners=4, logdir=str(tmp_path / "x"))
    with pytest.raises(ConfigError, match="one learner per device"):
        system.run(config)


_MULTIHOST_PMAP = """
import json, sys
import numpy as np
from flax import serialization
from systems.common.checkpoint import list_checkpoints
from systems.gala import system
config = system.GALAConfig(
    env_id="CartPole-v1", seed=5, sync_interval=5, envs_per_learner=4, num_learners=4, total_steps=4 * 20 * 10,
    eval_episodes=0, quiet=True, gossip="pmap", logdir=sys.argv[1], {extra}
)
summary = system.run(config)
with open(list_checkpoints(summary["run_dir"])[-1], "rb") as f:
    params = serialization.msgpack_restore(f.read())["state"]["params"]
import jax
print(json.dumps([np.asarray(x).reshape(np.shape(x)[0], -1).tolist() for x in jax.tree_util.tree_leaves(params)]))
"""


@pytest.mark.slow
def test_pmap_gossip_over_two_processes_equals_one_process(tmp_path):
    single = run_python(
        f"import sys; sys.argv = ['x', {str(tmp_path / 'single')!r}]\n" + _MULTIHOST_PMAP.format(extra=""), 4
    )
    single_leaves = [np.asarray(x) for x in json.loads(single.strip().splitlines()[-1])]
    port = free_port()
    codes = [
        f"import sys; sys.argv = ['x', {str(tmp_path / 'multi')!r}]\n"
        + _MULTIHOST_PMAP.format(extra=f'coordinator_address="127.0.0.1:{port}", num_processes=2, process_id={pid}')
        for pid in range(2)
    ]
    per_process = []
    for stdout in run_processes(codes, num_devices=2, workdir=str(tmp_path)):
        line = [x for x in stdout.splitlines() if x.startswith("[")][-1]
        per_process.append([np.asarray(x) for x in json.loads(line)])
    # Process p holds learners 2p and 2p + 1; together they are the single process's four learners.
    for leaf, (first, second) in zip(single_leaves, zip(*per_process, strict=True), strict=True):
        np.testing.assert_allclose(np.concatenate([first, second]), leaf, rtol=1e-5, atol=1e-6)
