"""Every Gymnasium observation space becomes a vector or an image the networks read (`envs.observations`)."""

import gymnasium
import numpy as np
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.factory import make_spec
from envs.observations import FlatObservation, PackedObservation, StackInChannels, adapted


class _Shows(gymnasium.Env):
    """An env whose observations are draws of `observation_space`."""

    action_space = spaces.Discrete(2)

    def __init__(self, observation_space):
        self.observation_space = observation_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


_LEAVES = st.one_of(
    st.integers(1, 6).map(spaces.Discrete),
    st.lists(st.integers(2, 4), min_size=1, max_size=3).map(spaces.MultiDiscrete),
    st.integers(1, 5).map(spaces.MultiBinary),
    st.lists(st.integers(1, 3), min_size=2, max_size=3).map(lambda shape: spaces.Box(-1.0, 1.0, tuple(shape))),
)
_SPACES = st.one_of(
    _LEAVES,
    st.lists(_LEAVES, min_size=1, max_size=3).map(lambda parts: spaces.Tuple(parts)),
    st.dictionaries(st.sampled_from("abcd"), _LEAVES, min_size=1, max_size=3).map(spaces.Dict),
)


@settings(max_examples=60, deadline=None)
@given(space=_SPACES, seed=st.integers(0, 2**16))
def test_any_flattenable_space_becomes_a_float32_vector_holding_every_part(space, seed):
    env = adapted(_Shows(space))
    assert isinstance(env, FlatObservation)
    box = env.observation_space
    assert len(box.shape) == 1 and box.dtype == np.float32 and box.shape == spaces.flatten_space(space).shape
    raw = _Shows(space)
    obs, _ = env.reset(seed=seed)
    expected, _ = raw.reset(seed=seed)
    assert obs.dtype == np.float32 and box.contains(obs)
    np.testing.assert_array_equal(obs, spaces.flatten(space, expected).astype(np.float32))


def test_vectors_and_images_are_left_as_they_are():
    for space in (spaces.Box(-1, 1, (3,)), spaces.Box(0, 255, (8, 8, 3), np.uint8)):
        env = _Shows(space)
        assert adapted(env) is env


def test_text_parts_are_left_out_with_one_note():
    said = []
    env = adapted(_Shows(spaces.Dict({"image": spaces.Box(0, 1, (2, 2)), "mission": spaces.Text(10)})), say=said.append)
    assert env.observation_space.shape == (4,) and len(said) == 1 and "mission" in said[0]


def test_a_frame_stack_becomes_channels_frame_major():
    image = spaces.Box(0, 255, (6, 5, 2), np.uint8)
    stacked = gymnasium.wrappers.FrameStackObservation(_Shows(image), stack_size=3)
    env = adapted(stacked)
    assert isinstance(env, StackInChannels) and env.observation_space.shape == (6, 5, 6)
    obs, _ = env.reset(seed=1)
    stack, _ = gymnasium.wrappers.FrameStackObservation(_Shows(image), stack_size=3).reset(seed=1)
    for k in range(3):
        np.testing.assert_array_equal(obs[..., 2 * k:2 * k + 2], stack[k])


def test_the_toy_text_tasks_and_a_mixed_dict_get_a_spec():
    assert make_spec("gymnasium/FrozenLake-v1").obs_shape == (16,)
    assert make_spec("gymnasium/Blackjack-v1").obs_shape == (32 + 11 + 2,)
    spec = make_spec("gymnasium/tests.gym_envs:MixedObs-v0")
    assert spec.obs_shape == (2 + 2,) and spec.obs_dtype == np.float32


_VECTOR_PARTS = st.lists(_LEAVES, min_size=0, max_size=2)


@settings(max_examples=30, deadline=None)
@given(parts=_VECTOR_PARTS, side=st.integers(3, 9), channels=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_a_dict_of_one_image_and_vectors_is_packed_pixels_first(parts, side, channels, seed):
    image = spaces.Box(0, 255, (side, side, channels), np.uint8)
    space = spaces.Dict({"image": image, **{f"v{i}": part for i, part in enumerate(parts)}})
    env = adapted(_Shows(space))
    assert isinstance(env, PackedObservation) and env.image_shape == image.shape
    obs, _ = env.reset(seed=seed)
    expected, _ = _Shows(space).reset(seed=seed)
    rest = [spaces.flatten(space[k], expected[k]) for k in space.spaces if k != "image"]
    np.testing.assert_array_equal(obs, np.concatenate([expected["image"].reshape(-1), *rest]).astype(np.float32))
    assert env.observation_space.contains(obs)


def test_minigrids_dict_is_its_image_through_a_cnn_and_its_direction_after_it(capsys):
    import jax
    import jax.numpy as jnp

    from agents.networks import make_network

    spec = make_spec("gymnasium/minigrid:MiniGrid-Empty-5x5-v0")
    assert spec.obs_image_shape == (7, 7, 3) and spec.obs_shape == (7 * 7 * 3 + 4,)
    assert "text parts mission are left out" in capsys.readouterr().err
    network = make_network(spec.obs_shape, spec.action_dim, False, image_shape=spec.obs_image_shape)
    params = network.init(jax.random.PRNGKey(0), jnp.zeros((1, *spec.obs_shape)))
    assert network.torso == "minatar_cnn" and "combined_torso" in params["params"]
    obs = jnp.zeros((2, *spec.obs_shape)).at[1, -4:].set(jnp.array([0.0, 1.0, 0.0, 0.0]))
    logits, _ = network.apply(params, obs)
    assert not np.allclose(logits[0], logits[1]), "the direction reaches the heads"
