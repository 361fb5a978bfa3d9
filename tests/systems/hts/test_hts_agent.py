"""HTS-RL's agent, written out in `systems.hts.system.make_agent`, is the agent of `learner.build`'s default parts,
which the synchronous baseline and the restore of a run use: the same network, optimizer and update."""

import jax
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.factory import make_spec
from systems.common import learner
from systems.hts import system as hts
from systems.sync import system as sync
from tests.fixtures import tiny_hts


@settings(max_examples=8, deadline=None)
@given(algo=st.sampled_from(["a2c", "ppo"]), env_id=st.sampled_from(["CartPole-v1", "Pendulum-v1"]),
       seed=st.integers(0, 2**16), num_minibatches=st.sampled_from([1, 2, 4]))
def test_hts_agent_is_the_default_parts_agent(tmp_path_factory, algo, env_id, seed, num_minibatches):
    config = tiny_hts(tmp_path_factory.mktemp("run"), env_id=env_id, algo=algo, seed=seed,
                      num_minibatches=num_minibatches)
    spec = make_spec(config.env_id)
    (hts_setup, hts_state), (sync_setup, sync_state) = hts.make_agent(config, spec), sync.make_agent(config, spec)
    assert hts_setup.network == sync_setup.network
    assert hts_setup.update_fn.func is sync_setup.update_fn.func
    assert hts_setup.update_fn.keywords["config"] == sync_setup.update_fn.keywords["config"]
    assert hts_setup.update_fn.keywords["config"] == learner.algo_update(config, spec).keywords["config"]
    same = jax.tree_util.tree_map(lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)), hts_state, sync_state)
    assert all(jax.tree_util.tree_leaves(same))
