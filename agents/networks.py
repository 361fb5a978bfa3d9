"""Actor-critic networks (Flax linen) for the HTS-RL agents.

Seed paper 000 (HTS-RL), Sec. 4.1 / Eq. (4)-(6): the learner differentiates an actor-critic
objective J(theta) built from a policy pi_theta(a|s) and a value V_phi(s); these modules provide
both heads.

* ``NatureCNN``: Mnih et al. (2015) "Human-level control through deep RL" torso for Atari frames,
  initialised as in CleanRL's ``ppo_atari.py`` (orthogonal, gain sqrt(2); policy head 0.01, value
  1).
* ``GFootballCNN``: the same Nature-style CNN as used by the HTS-RL / GFootball baselines' "cnn"
  policy, on the 72x96x4 super-mini-map (SMM) observation.
* ``BA3CTorso``: the tensorpack A3C network that Distributed BA3C (seed paper 001, Adamski et al.
  2018, Sec. 2.5 and Table 2) is built on: four SAME convolutions each followed by 2x2 max pooling,
  then one fully connected layer of ``hidden`` units, whose width the paper shrank from 256 to 128 to
  cut communication.
* ``MinAtarCNN``: the network of MinAtar's baselines (Young & Tian 2019, "MinAtar", Sec. 4: one 3x3 convolution of
  16 filters, stride 1, then 128 units) for small channels-last images such as gymnax's 10x10xC MinAtar games.
* ``PixelCNN``: the Nature CNN's layers on any other uint8 image of sides 36 or more, channels first (``CxHxW``,
  ``pixel_cnn_chw``) or last (``HxWxC``, ``pixel_cnn_hwc``), in XLA's own convolution: a user's Gymnasium env.
* ``MLPTorso`` / MLP actor-critic: CleanRL ``ppo.py`` / ``ppo_continuous_action.py`` (separate actor
  and critic MLPs, tanh, state-independent learned log-std for continuous actions). Options for the MLP
  only: widths, ReLU instead of tanh, the initial log-std, and PyTorch's default initializer instead of the
  orthogonal one (SB3's ``ortho_init=False``, used by rl-zoo3's tuned MuJoCo PPO; departure: biases start at
  0, where PyTorch draws them like the weights).

The CNNs' convolutions have `nn.Conv`'s parameters and function, computed in the forms of a convolution plan
(`agents.conv`): on a CPU the fastest exact forms XLA CPU runs (`CPU_CONV_PLANS`, measured by
`benchmarks/cnn_cpu.py`), elsewhere XLA's own convolution (cuDNN on a GPU).
"""

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from agents import conv as conv_lib
from agents.distributions import Factored, StateDependentGaussian
from agents.hyperparams import hyperparameter

_TORSO_GAIN = float(np.sqrt(2.0))
# CleanRL: a tiny policy-head init makes the initial policy close to uniform / zero-mean,
# and a unit-gain value head keeps initial value predictions O(1).
_POLICY_HEAD_GAIN = 0.01
_VALUE_HEAD_GAIN = 1.0

NATURE_CNN_OBS_SHAPE = (4, 84, 84)
GFOOTBALL_SMM_OBS_SHAPE = (72, 96, 4)
TORSOS = ("nature_cnn", "gfootball_cnn", "mlp", "ba3c", "minatar_cnn", "pixel_cnn_chw", "pixel_cnn_hwc")
# Image sides MinAtar's CNN takes (10 in MinAtar): its one unstrided convolution grows the dense layer with the area.
MINATAR_SIDES = (3, 32)
# The Nature CNN's three VALID convolutions (8/4, 4/2, 3/1) need sides of 36 or more; channels at most this many.
PIXEL_MIN_SIDE, PIXEL_MAX_CHANNELS = 36, 16
# Seed paper 001 Table 2 uses 256 hidden units as its initial setup (and settles on 128).
BA3C_DEFAULT_HIDDEN = 256
ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}
# PyTorch's nn.Linear default: kaiming_uniform(a=sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
TORCH_LINEAR_INIT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def _dense(features: int, gain: float, orthogonal: bool = True) -> nn.Dense:
    kernel_init = nn.initializers.orthogonal(gain) if orthogonal else TORCH_LINEAR_INIT
    return nn.Dense(features, kernel_init=kernel_init, bias_init=nn.initializers.zeros)


class LayerForms(NamedTuple):
    """The `agents.conv` forms of one convolution: `actor` for a forward pass at a small batch (at most
    `SMALL_BATCH` rows: the actors' inference), `forward` and `backward` for larger batches (the learner)."""

    actor: str
    forward: str
    backward: str


ConvPlan = tuple  # one LayerForms per convolution of the torso, first to last
SMALL_BATCH = 32


def uniform_conv_plan(form: str, layers: int = 3) -> ConvPlan:
    return (LayerForms(form, form, form),) * layers


# A candidate `systems.common.conv_tuning` times beside the table: the first convolution as space-to-depth in every
# pass, the others as XLA's convolution.
SPACE_TO_DEPTH_FIRST_PLAN = (LayerForms("space_to_depth", "space_to_depth", "space_to_depth"),
                     LayerForms("direct", "direct", "direct"), LayerForms("direct", "direct", "direct"))
# XLA CPU's fastest exact forms as `benchmarks/cnn_cpu.py` times them: the actors' small batches run XLA's
# convolution in NHWC (the fastest whole network at a few frames); the learner's minibatches run channels-major, the
# first two layers as space-to-depth (the fastest whole Nature CNN value and gradient at 256 frames). Per-layer
# winners in NHWC (a shift_add gradient under XLA's forward pass) do not add up to a fast whole network, so the plan
# is chosen by whole-network time. GPUs keep XLA's convolution (cuDNN).
_CPU_PLAN = (LayerForms("direct", "cm_space_to_depth", "cm_space_to_depth"),
             LayerForms("direct", "cm_space_to_depth", "cm_space_to_depth"),
             LayerForms("direct", "cm_slices", "cm_slices"))
# BA3C's stride-1 SAME convolutions at 84x84 and 42x42: im2col's patch matrices are gigabytes at the learner's batch,
# so its forward pass is several times slower than XLA's, but XLA's convolution gradient is slower still; so XLA's
# forward pass is kept and the gradient taken through im2col by slices.
_BA3C_CPU_PLAN = (LayerForms("direct", "direct", "slices"),) * 4
# MinAtar's one 3x3 convolution on 10x10 planes: im2col by slices in every pass, faster than XLA's convolution for
# one agent and more so for agents vmapped (Anakin), forward and gradient alike.
_MINATAR_CPU_PLAN = (LayerForms("slices", "slices", "slices"),)
CPU_CONV_PLANS = {"nature": _CPU_PLAN, "gfootball": _CPU_PLAN, "ba3c": _BA3C_CPU_PLAN, "minatar": _MINATAR_CPU_PLAN}


def torso_network(torso: str) -> str | None:
    """The `CPU_CONV_PLANS` name of a CNN torso ("nature_cnn" -> "nature"); None for the MLP."""
    return {"nature_cnn": "nature", "gfootball_cnn": "gfootball", "ba3c": "ba3c"}.get(torso)


def default_conv_plan(network: str) -> ConvPlan:
    """The plan of `network` ("nature", "gfootball", "ba3c" or "minatar") on the default backend: CPU_CONV_PLANS on
    a CPU, XLA's convolution everywhere else."""
    if jax.default_backend() == "cpu":
        return CPU_CONV_PLANS[network]
    return uniform_conv_plan("direct", layers=len(CPU_CONV_PLANS[network]))


class Conv(nn.Module):
    """``nn.Conv(features, (kernel, kernel), strides=(stride, stride), padding="VALID")`` with the same parameters
    (``kernel [k, k, C, O]``, ``bias [O]``, orthogonal init with gain sqrt(2), zero bias) and the same function up to
    float rounding, computed in the given `agents.conv` forms (NHWC, or channels-major for the `cm_` forms)."""

    features: int
    kernel: int
    stride: int

    @nn.compact
    def __call__(self, x: jnp.ndarray, forward: str = "direct", backward: str | None = None) -> jnp.ndarray:
        chex.assert_rank(x, 4)  # [B, H, W, C], or [C, B, H, W] channels-major
        channels = x.shape[0] if conv_lib.channels_major(forward) else x.shape[-1]
        kernel = self.param("kernel", nn.initializers.orthogonal(_TORSO_GAIN),
                            (self.kernel, self.kernel, channels, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        return conv_lib.conv(x, kernel, bias, self.stride, forward=forward, backward=backward)


# Module names of the three convolutions as the torso had them with `nn.Conv` (`Conv8x8Stride4_0`, then two
# `nn.Conv`s): the same names give the same parameter tree, so earlier checkpoints load and the initial parameters
# of a seed are unchanged.
_TRUNK_NAMES = ("Conv8x8Stride4_0", "Conv_0", "Conv_1")
_TRUNK_LAYERS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # features, kernel, stride


def trunk_forms(plan: ConvPlan, batch: int) -> tuple[tuple[str, str], ...]:
    """(forward, backward) form of each convolution for a batch of `batch` rows: the actor forms (and their own
    gradients) up to SMALL_BATCH rows, the learner forms above. All of them take one layout."""
    forms = tuple((f.actor, f.actor) if batch <= SMALL_BATCH else (f.forward, f.backward) for f in plan)
    layouts = {conv_lib.channels_major(form) for pair in forms for form in pair}
    if len(layouts) != 1:
        raise ValueError(f"a convolution plan mixes the channels-major and NHWC layouts: {forms}")
    return forms


def _nature_trunk(obs: jnp.ndarray, plan: ConvPlan, *, channels_first: bool) -> jnp.ndarray:
    """Conv 32x8x8/4, 64x4x4/2, 64x3x3/1, dense 512 on uint8 frames ([B, C, H, W] if `channels_first`, else
    [B, H, W, C]) scaled to [0, 1]. The convolutions run in NHWC or, for the channels-major forms, in
    [C, B, H, W]: the frames are transposed once on the way in and the features once before the dense layer, whose
    input keeps the (h, w, c) order either way."""
    forms = trunk_forms(plan, obs.shape[0])
    if conv_lib.channels_major(forms[0][0]):
        x = jnp.transpose(obs, (1, 0, 2, 3) if channels_first else (3, 0, 1, 2)).astype(jnp.float32) / 255.0
    else:
        x = obs.astype(jnp.float32) / 255.0
        x = jnp.transpose(x, (0, 2, 3, 1)) if channels_first else x  # Flax convolutions are NHWC
    for (features, kernel, stride), (forward, backward), name in zip(_TRUNK_LAYERS, forms, _TRUNK_NAMES, strict=True):
        x = nn.relu(Conv(features, kernel, stride, name=name)(x, forward, backward))
    if conv_lib.channels_major(forms[0][0]):
        x = conv_lib.from_channels_major(x)
    x = x.reshape((x.shape[0], -1))  # [B, h w c]
    return nn.relu(_dense(512, _TORSO_GAIN)(x))


class NatureCNN(nn.Module):
    """Nature DQN torso for EnvPool Atari frames.

    Input: uint8 ``[B, 4, 84, 84]`` (stacked frames, channels first as EnvPool emits them).
    Output: float32 ``[B, 512]``. ``conv_plan``: the convolutions' forms (None: `default_conv_plan`).
    """

    conv_plan: ConvPlan | None = None

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        chex.assert_rank(obs, 4)
        chex.assert_shape(obs, (None, *NATURE_CNN_OBS_SHAPE))
        return _nature_trunk(obs, self.conv_plan or default_conv_plan("nature"), channels_first=True)


class GFootballCNN(nn.Module):
    """Nature-style CNN used by the HTS-RL / GFootball baselines' "cnn" policy.

    Simplification: the original "gfootball_smm" torso is replaced by the plain Nature CNN
    (conv 32 8x8 s4, 64 4x4 s2, 64 3x3 s1, dense 512), which the baselines' "cnn" policy uses.

    Input: uint8 ``[B, 72, 96, 4]`` (SMM extracted map, channels last).
    Output: float32 ``[B, 512]``. ``conv_plan``: the convolutions' forms (None: `default_conv_plan`).
    """

    conv_plan: ConvPlan | None = None

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        chex.assert_rank(obs, 4)
        chex.assert_shape(obs, (None, *GFOOTBALL_SMM_OBS_SHAPE))
        return _nature_trunk(obs, self.conv_plan or default_conv_plan("gfootball"), channels_first=False)


class PixelCNN(nn.Module):
    """The Nature CNN's layers (conv 32x8x8/4, 64x4x4/2, 64x3x3/1, dense 512, ReLU; CleanRL's initializer) on a uint8
    image of any sides >= 36 (``[B, C, H, W]`` if ``channels_first``, else ``[B, H, W, C]``) scaled to [0, 1], in
    XLA's own convolution (the tuned CPU plans assume Atari's 84x84). Output: float32 ``[B, 512]``."""

    channels_first: bool

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        return _nature_trunk(obs, uniform_conv_plan("direct"), channels_first=self.channels_first)


class MinAtarCNN(nn.Module):
    """MinAtar's torso (module docstring): conv 16 3x3 stride 1 VALID, ReLU, dense 128, ReLU; CleanRL's initializer.
    The convolution is `Conv` in the plan's forms (`nn.Conv`'s parameters, as before), on a CPU im2col by slices:
    XLA CPU's convolution is slow under `vmap` over agents (Anakin), where it becomes a grouped convolution.

    Input: ``[B, H, W, C]`` channels last (gymnax MinAtar: float 0/1 planes, 10x10; uint8 pixels are scaled to
    [0, 1]). Output: float32 ``[B, 128]``.
    """

    conv_plan: ConvPlan | None = None

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        chex.assert_rank(obs, 4)
        ((forward, backward),) = trunk_forms(self.conv_plan or default_conv_plan("minatar"), obs.shape[0])
        x = obs.astype(jnp.float32) / (255.0 if obs.dtype == jnp.uint8 else 1.0)
        x = nn.relu(Conv(16, 3, 1)(x, forward, backward))
        return nn.relu(_dense(128, _TORSO_GAIN)(x.reshape(x.shape[0], -1)))


BA3C_LAYERS = ((32, 5), (32, 5), (64, 4), (64, 3))  # features, kernel (stride 1, SAME), each then a 2x2 max pool


class BA3CTorso(nn.Module):
    """Tensorpack A3C / Distributed BA3C torso (seed paper 001, Sec. 2.5, Table 2) for EnvPool Atari frames.

    Conv 5x5x32, 5x5x32, 4x4x64, 3x3x64 (stride 1, SAME, ReLU), each followed by a 2x2 stride-2 VALID max
    pool (84 -> 42 -> 21 -> 10 -> 5, so 5 * 5 * 64 = 1600 features), then Dense(``hidden``) + ReLU.

    Parameter count of the full discrete ``ActorCritic`` with ``A`` actions:
    ``98,624 + hidden * (1600 + 1 + A + 1) + A + 1`` (convolutions 98,624; dense ``1600 hidden + hidden``;
    policy head ``hidden A + A``; value head ``hidden + 1``). The per-hidden-unit slope 1600 + 1 + A + 1 is
    exactly Table 2's: 1608 for the 6 actions of their game (538,119 - 332,295 = 128 x 1608). The constant
    part is 98,631 here against the paper's 126,471 (538,119 - 256 x 1608): 27,840 fewer, because the paper
    does not give its exact input size and convolution shapes; we keep EnvPool's 4x84x84 grey frames.

    Input: uint8 ``[B, 4, 84, 84]`` (channels first). Output: float32 ``[B, hidden]``.
    """

    hidden: int = BA3C_DEFAULT_HIDDEN
    conv_plan: ConvPlan | None = None

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        chex.assert_rank(obs, 4)
        chex.assert_shape(obs, (None, *NATURE_CNN_OBS_SHAPE))
        forms = trunk_forms(self.conv_plan or default_conv_plan("ba3c"), obs.shape[0])
        channels_major = conv_lib.channels_major(forms[0][0])
        if channels_major:
            x = jnp.transpose(obs, (1, 0, 2, 3)).astype(jnp.float32) / 255.0  # [C, B, H, W]
        else:
            x = jnp.transpose(obs.astype(jnp.float32) / 255.0, (0, 2, 3, 1))  # NCHW -> NHWC
        spatial = (2, 3) if channels_major else (1, 2)
        for i, ((features, kernel), (forward, backward)) in enumerate(zip(BA3C_LAYERS, forms, strict=True)):
            # SAME padding as XLA pads it (the extra row and column after), then a VALID convolution.
            pads = [(0, 0)] * 4
            for axis in spatial:
                pads[axis] = ((kernel - 1) // 2, kernel // 2)
            x = nn.relu(Conv(features, kernel, 1, name=f"Conv_{i}")(jnp.pad(x, pads), forward, backward))
            window = tuple(2 if axis in spatial else 1 for axis in range(4))
            x = lax.reduce_window(x, -jnp.inf, lax.max, window, window, "VALID")  # 2x2 max pool, stride 2
        if channels_major:
            x = conv_lib.from_channels_major(x)
        x = x.reshape((x.shape[0], -1))  # [B, 1600], (h, w, c) order
        return nn.relu(_dense(self.hidden, _TORSO_GAIN)(x))  # [B, hidden]


@dataclasses.dataclass(frozen=True, kw_only=True)
class NetworkHyperparameters:
    """The on-policy actor-critic's shape (``make_network``'s MLP and policy arguments); defaults: CleanRL's."""

    hidden_sizes: tuple = hyperparameter(
        (64, 64), "MLP hidden sizes of vector-observation tasks, e.g. 256,256 (default: preset).",
        search=("categorical", ("64,64", "128,128", "256,256")))
    activation: str = hyperparameter("tanh", "MLP nonlinearity (default tanh).", choices=tuple(ACTIVATIONS))
    orthogonal_init: bool = hyperparameter(
        True, "MLP: orthogonal init (CleanRL; default) or PyTorch's default (SB3 ortho_init=False).")
    log_std_init: float = hyperparameter(0.0, "Initial log-std of a continuous policy (default 0).")
    use_sde: bool = hyperparameter(
        False, "Continuous policy: generalized state-dependent exploration (gSDE; SB3's use_sde): noise from the "
        "policy's features times an exploration matrix held for --sde_sample_freq steps (default off).")
    sde_sample_freq: int = hyperparameter(
        -1, "gSDE: env steps between new exploration matrices; -1: one a round of --sync_interval steps (SB3's "
        "default: one a rollout).")

    def network_settings(self) -> dict:
        """``make_network``'s keyword arguments of these hyperparameters (all but the executor's
        ``sde_sample_freq``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(NetworkHyperparameters)
                if f.name != "sde_sample_freq"}

    def key_hold(self, round_steps: int) -> int:
        """How many consecutive steps of an env share one action key (``agents.acting.action_keys``): 1, or
        with gSDE ``sde_sample_freq`` (-1: ``round_steps``), the steps one exploration matrix lasts."""
        if not self.use_sde:
            return 1
        return int(round_steps) if self.sde_sample_freq < 1 else int(self.sde_sample_freq)


class MLPTorso(nn.Module):
    """MLP for vector observations ``[B, D]`` -> ``[B, hidden_sizes[-1]]`` (tanh, or ``activation``)."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    orthogonal_init: bool = True

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> jnp.ndarray:
        chex.assert_rank(obs, 2)
        x = obs.astype(jnp.float32)
        for size in self.hidden_sizes:
            x = ACTIVATIONS[self.activation](_dense(size, _TORSO_GAIN, self.orthogonal_init)(x))
        return x


class ActorCritic(nn.Module):
    """Policy and value heads on a torso.

    Attributes:
        torso: one of ``TORSOS``.
        action_dim: number of discrete actions, or dimension of the continuous action.
        continuous: Gaussian policy if True, categorical otherwise.
        hidden_sizes: MLP hidden sizes (only used by the ``"mlp"`` torso).
        hidden: width of the fully connected layer (only used by the ``"ba3c"`` torso).
        activation, orthogonal_init: the MLP's nonlinearity and initializer (the ``"mlp"`` torso and its heads).
        log_std_init: the initial state-independent log-std of a continuous policy (with ``use_sde``, of every
            entry of the exploration matrix's ``[D, A]`` log-std).
        use_sde: a continuous policy's output is ``distributions.StateDependentGaussian`` over the actor's last
            features (gSDE) instead of a state-independent Gaussian.
        conv_plan: the CNN torsos' convolution forms (`LayerForms` per layer; None: the backend's default).
        action_nvec: the choices of each component of a factored (MultiDiscrete / MultiBinary) action, or ``()``;
            when given, ``action_dim`` is its length and the policy head has ``sum(action_nvec)`` logits.
        image_shape: the shape of an image packed first in a vector observation with other parts (a Gymnasium Dict
            of an image and vectors, `envs.observations.PackedObservation`), or ``()``. When given, the image's
            pixels go through ``torso`` and the other parts are concatenated after its features, then one shared
            MLP of ``hidden_sizes`` feeds both heads (Stable-Baselines3's ``MultiInputPolicy``: its
            ``CombinedExtractor`` and the policy's MLP).

    ``__call__(obs)`` returns ``(policy_out, value)``: ``value`` is float32 ``[B]``;
    ``policy_out`` is logits ``[B, A]`` (discrete), ``distributions.Factored`` logits ``[B, sum(nvec)]``
    (factored) or ``(mean [B, A], log_std [B, A])`` (continuous).
    """

    torso: str
    action_dim: int
    continuous: bool
    hidden_sizes: tuple = (64, 64)
    hidden: int = BA3C_DEFAULT_HIDDEN
    activation: str = "tanh"
    orthogonal_init: bool = True
    log_std_init: float = 0.0
    conv_plan: ConvPlan | None = None
    action_nvec: tuple = ()
    image_shape: tuple = ()
    use_sde: bool = False

    @nn.compact
    def __call__(self, obs: jnp.ndarray):
        if self.image_shape:
            actor_features = critic_features = self._packed_features(obs)
        elif self.torso == "mlp":
            # CleanRL: separate actor and critic MLPs, so the value loss does not shape the
            # policy's features.
            mlp = dict(hidden_sizes=self.hidden_sizes, activation=self.activation,
                       orthogonal_init=self.orthogonal_init)
            actor_features = MLPTorso(**mlp, name="actor_torso")(obs)
            critic_features = MLPTorso(**mlp, name="critic_torso")(obs)
        else:
            # Shared CNN torso: conv features are expensive, so both heads read the same ones.
            actor_features = critic_features = self._image_features(obs)

        orthogonal = self.orthogonal_init or self.torso != "mlp" or bool(self.image_shape)
        value = _dense(1, _VALUE_HEAD_GAIN, orthogonal)(critic_features)[:, 0].astype(jnp.float32)  # [B]
        head_width = sum(self.action_nvec) if self.action_nvec else self.action_dim
        head = _dense(head_width, _POLICY_HEAD_GAIN, orthogonal)(actor_features).astype(jnp.float32)  # [B, A]
        if self.action_nvec:
            return Factored(head, tuple(self.action_nvec)), value
        if not self.continuous:
            return head, value
        if self.use_sde:
            return sde_policy_out(self, head, actor_features), value
        # State-independent log-std (CleanRL continuous PPO), broadcast to every row.
        log_std_init = nn.initializers.constant(self.log_std_init)
        log_std = self.param("log_std", log_std_init, (self.action_dim,), jnp.float32)
        return (head, jnp.broadcast_to(log_std, head.shape)), value

    def _image_features(self, obs: jnp.ndarray) -> jnp.ndarray:
        """The CNN torso's features of an image batch."""
        return image_torso_module(self.torso, self.conv_plan, self.hidden)(obs)

    def _packed_features(self, obs: jnp.ndarray) -> jnp.ndarray:
        """The packed image's pixels (cast back to uint8) through the image torso, the other parts concatenated
        after its features, then the shared MLP."""
        pixels = int(np.prod(self.image_shape))
        image = obs[:, :pixels].reshape((obs.shape[0], *self.image_shape)).astype(jnp.uint8)
        x = jnp.concatenate([self._image_features(image), obs[:, pixels:].astype(jnp.float32)], axis=-1)
        return MLPTorso(hidden_sizes=self.hidden_sizes, activation="relu", orthogonal_init=True,
                        name="combined_torso")(x)


def image_torso_module(torso: str, conv_plan: ConvPlan | None, hidden: int = BA3C_DEFAULT_HIDDEN,
                       name: str = "torso") -> nn.Module:
    """The CNN module of image torso `torso` (one of ``TORSOS`` but ``"mlp"``): image batch -> features [B, F]."""
    if torso in ("nature_cnn", "gfootball_cnn"):
        torso_cls = NatureCNN if torso == "nature_cnn" else GFootballCNN
        return torso_cls(conv_plan, name=name)
    if torso == "ba3c":
        return BA3CTorso(hidden, conv_plan, name=name)
    if torso == "minatar_cnn":
        return MinAtarCNN(name=name)
    if torso in ("pixel_cnn_chw", "pixel_cnn_hwc"):
        return PixelCNN(torso == "pixel_cnn_chw", name=name)
    raise ValueError(f"Unknown torso {torso!r}; expected one of {TORSOS}.")


def image_torso(obs_shape: tuple) -> str | None:
    """The torso `make_network` picks for an image of `obs_shape` that is not Atari's or GFootball's: MinAtar's CNN
    for a small ``HxWxC`` one, the pixel CNN for a larger ``CxHxW`` or ``HxWxC`` one; None if neither fits."""
    for torso in ("minatar_cnn", "pixel_cnn_chw", "pixel_cnn_hwc"):
        if _torso_fits(torso, tuple(obs_shape)):
            return torso
    return None


def _torso_fits(torso: str, obs_shape: tuple) -> bool:
    if torso in ("pixel_cnn_chw", "pixel_cnn_hwc"):
        if len(obs_shape) != 3:
            return False
        channels, sides = ((obs_shape[0], obs_shape[1:]) if torso == "pixel_cnn_chw"
                           else (obs_shape[2], obs_shape[:2]))
        return channels <= PIXEL_MAX_CHANNELS and min(sides) >= PIXEL_MIN_SIDE
    if torso in ("nature_cnn", "ba3c"):
        return obs_shape == NATURE_CNN_OBS_SHAPE
    if torso == "gfootball_cnn":
        return obs_shape == GFOOTBALL_SMM_OBS_SHAPE
    if torso == "minatar_cnn":
        return len(obs_shape) == 3 and all(MINATAR_SIDES[0] <= side <= MINATAR_SIDES[1] for side in obs_shape[:2])
    return len(obs_shape) == 1


_TORSO_NEEDS = {
    "nature_cnn": f"Atari frames {NATURE_CNN_OBS_SHAPE} (channels first)",
    "ba3c": f"Atari frames {NATURE_CNN_OBS_SHAPE} (channels first)",
    "gfootball_cnn": f"the GFootball SMM shape {GFOOTBALL_SMM_OBS_SHAPE}",
    "mlp": "a rank-1 vector observation",
    "minatar_cnn": f"a small channels-last image, sides {MINATAR_SIDES[0]} to {MINATAR_SIDES[1]}",
    "pixel_cnn_chw": f"a channels-first image of sides >= {PIXEL_MIN_SIDE}, at most {PIXEL_MAX_CHANNELS} channels",
    "pixel_cnn_hwc": f"a channels-last image of sides >= {PIXEL_MIN_SIDE}, at most {PIXEL_MAX_CHANNELS} channels",
}


def make_network(
    obs_shape: tuple,
    action_dim: int,
    continuous: bool,
    *,
    torso: str | None = None,
    hidden: int = BA3C_DEFAULT_HIDDEN,
    hidden_sizes: tuple = (64, 64),
    activation: str = "tanh",
    orthogonal_init: bool = True,
    log_std_init: float = 0.0,
    conv_plan: ConvPlan | None = None,
    action_nvec: tuple = (),
    image_shape: tuple = (),
    use_sde: bool = False,
) -> ActorCritic:
    """Builds the actor-critic, picking the torso from the (unbatched) observation shape unless given.

    ``torso=None``: ``(4, 84, 84)`` -> Nature CNN (Atari), ``(72, 96, 4)`` -> GFootball CNN (SMM), a small
    ``HxWxC`` image (sides ``MINATAR_SIDES``) -> MinAtar's CNN, rank 1 -> MLP.
    ``torso="ba3c"``: the Distributed BA3C network (seed paper 001) with ``hidden`` units, Atari shape only.
    Any explicit torso must fit the observation shape. ``hidden_sizes``, ``activation`` and ``orthogonal_init``
    shape the MLP (vector observations); ``log_std_init`` and ``use_sde`` any continuous policy; ``conv_plan`` the
    CNN torsos' convolution forms (None: the backend's default); ``action_nvec`` a factored action's choices per
    component (``action_dim`` must be its length); ``image_shape`` an image packed first in a vector observation,
    whose torso is picked (or checked) from ``image_shape`` instead.
    """
    obs_shape = tuple(int(d) for d in obs_shape)
    image_shape = tuple(int(d) for d in image_shape)
    if image_shape:
        if len(obs_shape) != 1 or obs_shape[0] < int(np.prod(image_shape)):
            raise ValueError(f"A packed image {image_shape} needs a vector observation of at least its "
                             f"{int(np.prod(image_shape))} pixels, got {obs_shape}.")
        network = make_network(image_shape, action_dim, continuous, torso=torso, hidden=hidden,
                               hidden_sizes=hidden_sizes, activation=activation, orthogonal_init=orthogonal_init,
                               log_std_init=log_std_init, conv_plan=conv_plan, action_nvec=action_nvec,
                               use_sde=use_sde)
        if network.torso == "mlp":
            raise ValueError(f"A packed image {image_shape} needs an image torso; {image_shape} is a vector.")
        return network.clone(image_shape=image_shape)
    if torso is None:
        if obs_shape == NATURE_CNN_OBS_SHAPE:
            torso = "nature_cnn"
        elif obs_shape == GFOOTBALL_SMM_OBS_SHAPE:
            torso = "gfootball_cnn"
        elif len(obs_shape) == 1:
            torso = "mlp"
        elif image_torso(obs_shape) is not None:
            torso = image_torso(obs_shape)
        else:
            raise ValueError(
                f"No network for observation shape {obs_shape}: expected {NATURE_CNN_OBS_SHAPE} "
                f"(Atari, channels first), {GFOOTBALL_SMM_OBS_SHAPE} (GFootball SMM, channels last), "
                f"a small channels-last image (MinAtar's CNN), an image of sides >= {PIXEL_MIN_SIDE} with at most "
                f"{PIXEL_MAX_CHANNELS} channels first or last (the pixel CNN) or a rank-1 vector observation."
            )
    elif torso not in TORSOS:
        raise ValueError(f"Unknown torso {torso!r}; expected one of {TORSOS}.")
    elif not _torso_fits(torso, obs_shape):
        raise ValueError(
            f"Torso {torso!r} does not fit observation shape {obs_shape}: it needs {_TORSO_NEEDS[torso]}."
        )
    if action_dim < 1:
        raise ValueError(f"action_dim must be >= 1, got {action_dim}.")
    if action_nvec and (len(action_nvec) != action_dim or min(action_nvec) < 1 or continuous):
        raise ValueError(f"action_nvec {tuple(action_nvec)} must give {action_dim} components of >= 1 choices "
                         "each, for a discrete policy.")
    if hidden < 1:
        raise ValueError(f"hidden must be >= 1, got {hidden}.")
    if not hidden_sizes or min(hidden_sizes) < 1:
        raise ValueError(f"hidden_sizes must be positive widths, got {hidden_sizes}.")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}.")
    if use_sde and not continuous:
        raise ValueError("use_sde (gSDE) explores a continuous action space; this task's actions are discrete.")
    return ActorCritic(
        torso=torso, action_dim=int(action_dim), continuous=bool(continuous), hidden=int(hidden),
        hidden_sizes=tuple(int(h) for h in hidden_sizes), activation=activation,
        orthogonal_init=bool(orthogonal_init), log_std_init=float(log_std_init), conv_plan=conv_plan,
        action_nvec=tuple(int(n) for n in action_nvec), use_sde=bool(use_sde),
    )


def sde_policy_out(module: nn.Module, mean: jnp.ndarray, features: jnp.ndarray):
    """gSDE's policy output (``distributions.StateDependentGaussian``) of ``mean [B, A]`` and the actor's last
    ``features [B, D]``, with the ``[D, A]`` log-std parameter ``log_std`` of ``module`` (a compact method's) at
    ``module.log_std_init`` (``StateDependentGaussian.of_features``: the features' gradient stopped)."""
    shape = (features.shape[-1], mean.shape[-1])
    log_std = module.param("log_std", nn.initializers.constant(module.log_std_init), shape, jnp.float32)
    return StateDependentGaussian.of_features(mean, features, log_std)
