"""The algorithm's hyperparameters come from the run config's fields of the same names (`learner.algo_config`)."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

import agents
from agents.ddpg import DDPGHyperparameters
from agents.dqn import DQNHyperparameters
from agents.losses import ActorCriticLossHyperparameters
from agents.networks import NetworkHyperparameters
from agents.normalization import NormalizationHyperparameters
from agents.offpolicy import ReplayLearningHyperparameters
from agents.offpolicy_networks import OffPolicyNetworkHyperparameters
from agents.optim import OffPolicyOptimizerHyperparameters, OptimizerHyperparameters
from agents.ppo import PPOHyperparameters
from systems.common import learner
from systems.common.config import TrainConfig
from systems.offpolicy.config import OffPolicyConfig
from systems.pal.config import PALConfig
from systems.spreeze.config import SpreezeConfig

_BUILD = {"unroll_epochs": True, "unroll_minibatches": False}


def test_every_hyperparameter_of_the_algorithms_is_a_train_config_field():
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for algo_cls in (agents.A2CConfig, agents.PPOConfig):
        names = {f.name for f in dataclasses.fields(algo_cls)} - set(_BUILD)
        assert names <= train_fields, names - train_fields


def test_each_hyperparameter_is_declared_once_beside_its_algorithm():
    """`TrainConfig` and `OffPolicyConfig` hold the agents' hyperparameter dataclasses by inheritance: each of their
    fields is the very field `agents/` declares (its help, choices and search distribution), never a second
    declaration (but Spreeze's `batch_size`, which also takes 'auto')."""
    declared = (ActorCriticLossHyperparameters, PPOHyperparameters, OptimizerHyperparameters,
                NetworkHyperparameters, NormalizationHyperparameters)
    own = set(vars(TrainConfig).get("__annotations__", {}))
    for declaring in declared:
        for field in dataclasses.fields(declaring):
            assert TrainConfig.__dataclass_fields__[field.name] is field, field.name
            assert field.name not in own, f"TrainConfig declares {field.name} again"
            if field.name != "normalize_advantages":  # PPO's fixed choice, not a flag
                assert field.metadata["help"], field.name
    for declaring in (ReplayLearningHyperparameters, OffPolicyOptimizerHyperparameters,
                      OffPolicyNetworkHyperparameters, DQNHyperparameters, DDPGHyperparameters):
        assert declaring.__module__.startswith("agents."), declaring
        for field in dataclasses.fields(declaring):
            for config_cls in (OffPolicyConfig, PALConfig, SpreezeConfig):
                if (config_cls, field.name) != (SpreezeConfig, "batch_size"):  # Spreeze's also takes 'auto' (3.4)
                    assert config_cls.__dataclass_fields__[field.name] is field, (config_cls, field.name)
            assert field.metadata["help"], field.name
    off_policy_own = set(vars(OffPolicyConfig).get("__annotations__", {}))
    assert off_policy_own == {"algo", "num_envs", "eval_deterministic"}  # run fields, not hyperparameters
    # A2C's own default (the n-step return of Eq. 4) keeps the loss's declared help and search distribution.
    a2c_lambda = agents.A2CConfig.__dataclass_fields__["gae_lambda"]
    assert a2c_lambda.default == 1.0
    assert a2c_lambda.metadata == ActorCriticLossHyperparameters.__dataclass_fields__["gae_lambda"].metadata


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
