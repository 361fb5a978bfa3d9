"""The algorithm's hyperparameters come from the run config's fields of the same names (`learner.algo_config`)."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

import agents
from systems.common import learner
from systems.common.config import TrainConfig

_BUILD = {"unroll_epochs": True, "unroll_minibatches": False}


def test_every_hyperparameter_of_the_algorithms_is_a_train_config_field():
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for algo_cls in (agents.A2CConfig, agents.PPOConfig):
        names = {f.name for f in dataclasses.fields(algo_cls)} - set(_BUILD)
        assert names <= train_fields, names - train_fields


@settings(max_examples=25, deadline=None)
@given(
    algo=st.sampled_from(["a2c", "ppo"]),
    gamma=st.floats(0.5, 1.0), gae_lambda=st.floats(0.0, 1.0), value_coef=st.floats(0.0, 2.0),
    entropy_coef=st.floats(0.0, 0.1), clip_eps=st.floats(0.05, 0.5), num_epochs=st.integers(1, 10),
    num_minibatches=st.integers(1, 8), normalize_advantages=st.booleans(), clip_value_loss=st.booleans(),
)
def test_algo_config_reads_each_field_of_the_run_config(algo, **values):
    config = TrainConfig(env_id="CartPole-v1", algo=algo, **values)
    build = _BUILD if algo == "ppo" else {}
    algo_config = learner.algo_config(config, **build)
    assert isinstance(algo_config, agents.A2CConfig if algo == "a2c" else agents.PPOConfig)
    for field in dataclasses.fields(algo_config):
        expected = build[field.name] if field.name in build else values[field.name]
        assert getattr(algo_config, field.name) == expected, field.name
