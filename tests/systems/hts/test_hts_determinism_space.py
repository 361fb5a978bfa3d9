"""HTS-RL's bit-identity over its configuration space (seed 000, section 4.1), drawn by hypothesis: for a seed, every
env count, actor count, pool layout (one shared pool or one per actor thread), EnvPool batch and inference batch the
validator accepts gives the parameters of the single-actor run with the same env count and inference batch, on every
env family. The hand-picked cases that once
broke (12 and 10 envs with several actors: rows placed by arrival in the forward pass) are explicit examples.

Each example is a short run (a few rounds of 4 steps); a reference run is made once per (family, envs, inference
batch) and reused, so an example costs one run of compiled programs plus, for a new shape, one compile."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from systems.common.rollout import RoundCollector, chunk_members
from systems.hts import system as hts
from systems.hts.system import HTSConfig

_ALPHA, _ROUNDS = 4, 3
_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _config(env_id: str, num_envs: int, inference_batch: int, logdir: str, **changes) -> HTSConfig:
    return HTSConfig(env_id=env_id, num_envs=num_envs, inference_batch=inference_batch, sync_interval=_ALPHA,
                     total_steps=num_envs * _ALPHA * _ROUNDS, num_epochs=2, num_minibatches=1, eval_episodes=0,
                     quiet=True, seed=5, logdir=logdir, **changes)


def _fingerprint(config: HTSConfig) -> str:
    summary = hts.run(config)
    assert summary["updates"] == _ROUNDS and summary["max_policy_lag"] == 1
    return summary["param_fingerprint"]


@functools.cache
def _reference(env_id: str, num_envs: int, inference_batch: int, root: str, frame_stack: int = 1,
               recurrent: str = "none", sde: int = 0) -> str:
    """The single-actor run: one thread, EnvPool's default batch for it."""
    return _fingerprint(_config(env_id, num_envs, inference_batch, tempfile.mkdtemp(dir=root), frame_stack=frame_stack,
                                **_extras(recurrent, sde)))


def _extras(recurrent: str, sde: int) -> dict:
    """A recurrent core of 8 units; gSDE with `sde` steps a matrix (0: off)."""
    memory = {} if recurrent == "none" else dict(recurrent=recurrent, rnn_size=8)
    return memory if sde == 0 else dict(memory, use_sde=True, sde_sample_freq=sde)


def _actors_and_pools(draw, num_envs: int) -> tuple[int, int, str]:
    """(num_actors, env_batch_size, env_pools) the validator accepts for `num_envs`: a pool per actor needs an env per
    actor and an EnvPool batch of at most the smallest pool's envs (0: the default)."""
    pools = draw(st.sampled_from(["shared", "per_actor"]))
    if pools == "shared":
        return draw(st.integers(1, 5)), draw(st.integers(0, num_envs)), pools
    num_actors = draw(st.integers(1, min(5, num_envs)))
    return num_actors, draw(st.integers(0, num_envs // num_actors)), pools


@st.composite
def _layouts(draw, max_envs: int):
    """(num_envs, num_actors, env_batch_size, inference_batch, env_pools): 0 is the default, any other value one the
    validator accepts (a batch of at most the envs)."""
    num_envs = draw(st.integers(1, max_envs))
    num_actors, env_batch, pools = _actors_and_pools(draw, num_envs)
    return num_envs, num_actors, env_batch, draw(st.integers(0, num_envs)), pools


def _check_equals_single_actor(root: str, env_id: str, layout: tuple, frame_stack: int = 1,
                               recurrent: str = "none", sde: int = 0) -> None:
    num_envs, num_actors, env_batch, inference, pools = layout
    config = _config(env_id, num_envs, inference, tempfile.mkdtemp(dir=root), num_actors=num_actors,
                     env_batch_size=env_batch, env_pools=pools, frame_stack=frame_stack, **_extras(recurrent, sde))
    hts.validate(config)
    reference = _reference(env_id, num_envs, hts.inference_batch(config), root, frame_stack, recurrent, sde)
    assert _fingerprint(config) == reference, layout


@settings(max_examples=6, **_SETTINGS)
@given(layout=_layouts(max_envs=33))
@example(layout=(12, 2, 0, 0, "shared"))  # the default batches with 12 envs: two actors split the envs 6 + 6
@example(layout=(12, 3, 0, 0, "shared"))
@example(layout=(10, 2, 0, 0, "shared"))
@example(layout=(10, 3, 0, 0, "per_actor"))  # pools of 4, 3 and 3 envs
def check_classic_or_box2d(env_id: str, layout: tuple) -> None:
    _check_equals_single_actor(_child_root(), env_id, layout)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["CartPole-v1", "LunarLander-v2"])
def test_classic_and_box2d_bits_do_not_depend_on_actors_or_batches(env_id):
    """In a child under XLA's default fusion emitters, as the other families (their docstring says why: at batch 1
    the policy is such a fused loop too)."""
    from tests.multidevice import run_with_fusion_emitters

    run_with_fusion_emitters(check_classic_or_box2d, env_id)


@settings(max_examples=5, **_SETTINGS)
@given(layout=_layouts(max_envs=12), cell=st.sampled_from(["lstm", "gru"]))
@example(layout=(12, 3, 2, 0, "shared"), cell="lstm")
@example(layout=(6, 2, 0, 4, "shared"), cell="gru")
@example(layout=(7, 3, 2, 0, "per_actor"), cell="lstm")
def check_recurrent(layout: tuple, cell: str) -> None:
    """The recurrent state belongs to the env (`agents.recurrent`): kept per env id in the collector, so which
    actor stepped an env, and with which others in EnvPool's batch, does not reach the bits."""
    _check_equals_single_actor(_child_root(), "CartPole-v1", layout, recurrent=cell)


@pytest.mark.slow
def test_recurrent_bits_do_not_depend_on_actors_or_batches():
    from tests.multidevice import run_with_fusion_emitters

    run_with_fusion_emitters(check_recurrent)


@settings(max_examples=3, **_SETTINGS)
@given(layout=_layouts(max_envs=12), sde=st.sampled_from([-1, 1, 3]), cell=st.sampled_from(["none", "lstm"]))
@example(layout=(12, 3, 0, 0, "shared"), sde=3, cell="none")
@example(layout=(6, 2, 3, 0, "shared"), sde=-1, cell="lstm")
def check_sde(layout: tuple, sde: int, cell: str) -> None:
    """gSDE's exploration matrix comes from the env's key held for `sde` steps (`agents.action_keys`), so it too
    belongs to the env: which actor stepped it does not reach the bits."""
    _check_equals_single_actor(_child_root(), "Pendulum-v1", layout, recurrent=cell, sde=sde)


@pytest.mark.slow
def test_sde_bits_do_not_depend_on_actors_or_batches():
    from tests.multidevice import run_with_fusion_emitters

    run_with_fusion_emitters(check_sde)


@st.composite
def _splits(draw, num_envs: int):
    """(num_envs, num_actors, env_batch_size, 0, env_pools) for a fixed env count: the actors, pools and EnvPool's
    batch drawn, the inference batch the default (one reference run, so one compile of the family's programs)."""
    num_actors, env_batch, pools = _actors_and_pools(draw, num_envs)
    return num_envs, num_actors, env_batch, 0, pools


@settings(max_examples=2, **_SETTINGS)
@given(data=st.data())
def check_other_family(env_id: str, num_envs: int, frame_stack: int, data) -> None:
    _check_equals_single_actor(_child_root(), env_id, data.draw(_splits(num_envs)), frame_stack)


@functools.cache
def _child_root() -> str:
    root = tempfile.mkdtemp(prefix="hts-space-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("env_id, num_envs", [
    ("gymnax/CartPole-v1", 7), ("gymnasium/CartPole-v1", 6),
    ("gymnasium/FrozenLake-v1", 5),  # a one-hot observation (envs.observations)
    ("gymnasium/tests.gym_envs:Dials-v0", 5),  # a factored action (envs.actions)
    ("Breakout-v5", 6),
])
def test_other_families_bits_do_not_depend_on_actors_or_batches(env_id, num_envs):
    """A JAX env, a user's Gymnasium env (worker processes; FrozenLake's through its one-hot observation, Dials' with
    a MultiDiscrete action) and a pixel env (the CNN), each at one env count. In a
    child under XLA's default fusion emitters (the pixel env: the launchers' flags, as XLA's convolutions run 15x
    slower at -O0): with the suite's quick-compile flags, the elemental emitter at -O0, gymnax CartPole's jitted step
    is not reproducible run to run in its last bits (XLA CPU; not under the launchers' flags)."""
    from tests.multidevice import call_in_child, run_with_fusion_emitters

    if env_id == "Breakout-v5":
        call_in_child(check_other_family, env_id, num_envs, 1, optimized=True)
    else:
        run_with_fusion_emitters(check_other_family, env_id, num_envs, 1)


@pytest.mark.slow
def test_stacked_frames_bits_do_not_depend_on_actors_or_batches():
    """`--frame_stack=3` on a JAX image env (the frames live in each env's state, so its bits are the env's own)."""
    from tests.multidevice import run_with_fusion_emitters

    run_with_fusion_emitters(check_stacked_frames)


def check_stacked_frames() -> None:
    check_other_family("jax/tests.jax_envs:make_frames", 5, 3)


@settings(max_examples=6, **_SETTINGS)
@given(data=st.data())
def check_learner_replicas(data) -> None:
    """1-3 learner replicas on devices 1-3 of four: for each replica count and env count, every actor count, EnvPool
    batch and actor device (0, or 0 and 1 with actor thread i on the (i mod 2)-th) gives the single-actor run, with
    or without an LSTM core (each replica re-runs its envs' sequences)."""
    replicas = data.draw(st.integers(1, 3), label="replicas")
    num_envs = replicas * data.draw(st.integers(1, 4), label="envs per replica")
    learners = ",".join(str(1 + i) for i in range(replicas))
    num_actors, env_batch, pools = _actors_and_pools(data.draw, num_envs)
    actors = data.draw(st.sampled_from(["0", "0,1"]), label="actor devices")
    recurrent = data.draw(st.sampled_from(["none", "lstm"]), label="recurrent")
    root = _child_root()
    reference = _reference_on_devices(num_envs, learners, root, recurrent)
    config = _config("CartPole-v1", num_envs, 0, tempfile.mkdtemp(dir=root), num_actors=num_actors,
                     env_batch_size=env_batch, env_pools=pools, actor_devices=actors, learner_devices=learners,
                     debug=True, **_extras(recurrent, 0))
    assert _fingerprint(config) == reference, (num_envs, learners, num_actors, env_batch, pools, actors, recurrent)


def check_twelve_envs_over_three_replicas() -> None:
    """The hand-picked case that once broke: 12 envs, three replicas, one and three actor threads."""
    root = _child_root()
    config = _config("CartPole-v1", 12, 0, tempfile.mkdtemp(dir=root), num_actors=3,
                     learner_devices="1,2,3")
    assert _fingerprint(config) == _reference_on_devices(12, "1,2,3", root)


@functools.cache
def _reference_on_devices(num_envs: int, learners: str, root: str, recurrent: str = "none") -> str:
    return _fingerprint(_config("CartPole-v1", num_envs, 0, tempfile.mkdtemp(dir=root), actor_devices="0",
                                learner_devices=learners, **_extras(recurrent, 0)))


@pytest.mark.slow
def test_learner_replicas_bits_do_not_depend_on_actors_batches_or_actor_devices():
    from tests.multidevice import run_python

    run_python("from tests.systems.hts import test_hts_determinism_space as t\n"
               "t.check_twelve_envs_over_three_replicas()\nt.check_learner_replicas()", num_devices=4)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=st.lists(st.integers(0, 7), max_size=40))
def test_chunks_hold_every_ready_env_once_and_no_row_twice(rows):
    rows = np.asarray(rows, np.int64)
    chunks = chunk_members(rows)
    members = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    assert sorted(members.tolist()) == list(range(len(rows)))
    assert all(len(set(rows[chunk].tolist())) == len(chunk) for chunk in chunks)
    # As few forward passes as the most crowded row needs.
    assert len(chunks) == (np.bincount(rows).max() if len(rows) else 0)


class _Spec:
    obs_shape, obs_dtype = (3,), np.float32


class _Executor:
    spec, num_envs = _Spec(), 12


@settings(max_examples=200, deadline=None, derandomize=True)
@given(chunk=st.sampled_from([4, 6, 12]),
       batches=st.lists(st.lists(st.integers(0, 11), unique=True, min_size=1), min_size=1, max_size=8))
def test_every_forward_pass_sees_its_rows_at_env_mod_chunk_and_zeros_elsewhere(chunk, batches):
    """Whatever ready batches came before (the padded chunk is the actor thread's reused buffer, or a gather, or the
    batch itself), each forward pass gets env e's observation at row e mod chunk and zeros in every other row, and
    each env's outputs come back to it."""
    seen = []

    def policy(params, obs, env_ids, env_steps, run_key):
        seen.append((obs.copy(), env_ids.copy()))
        return obs[:, 0] * 10, obs[:, 1], obs[:, 2]

    collector = RoundCollector(_Executor(), policy_fn=policy, run_key=None, sync_interval=4, inference_batch=chunk,
                               first_round=0, total_rounds=2, params=None, version=0,
                               on_round_complete=lambda storage, last: None, action_shape=(), action_dtype=np.float32)
    for batch in batches:
        env_ids = np.asarray(batch, np.int32)
        obs = np.stack([np.full(3, e + 1, np.float32) for e in env_ids])
        seen.clear()
        actions, _, _ = collector._forward(None, obs, env_ids, np.zeros(len(env_ids), np.int32))
        assert actions.tolist() == (10 * (env_ids + 1)).tolist()
        for chunk_obs, chunk_ids in seen:
            rows = chunk_obs[:, 0]
            real = rows > 0
            assert (chunk_obs[~real] == 0).all() and (rows[real] - 1 == chunk_ids[real]).all()
            assert ((rows[real] - 1) % chunk == np.flatnonzero(real)).all()
        assert sum(int((c[:, 0] > 0).sum()) for c, _ in seen) == len(env_ids)
