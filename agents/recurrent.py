"""Actor-critics with memory: an LSTM or GRU core and the feed-forward torso, then the policy and value heads.

Where the core sits (``rnn_input``): for vector observations it reads the observation and the MLP follows it
(sb3-contrib's ``RecurrentPPO``: LSTM, then ``net_arch``); for images it reads the CNN's features (CleanRL's
``ppo_atari_lstm.py``), or, asked for, the MLP's features on vectors too (purejaxrl's ``ppo_rnn.py``). Reading the
observation lets the core see the raw positions from which a velocity is inferred, rather than features the torso
learned for the policy before the core could supply that velocity.

The recurrent state belongs to the env, not to whoever steps it (HTS-RL's actors step envs asynchronously, seed
000 Sec. 4.1): the actors keep one state per env id, zero it where an observation opens an episode (done-masking,
as purejaxrl's ``ScannedRNN`` and CleanRL's ``ppo_atari_lstm.py``) and store each env's state at the round's start
with the round (``Rollout.initial_carry``). The learner re-runs each env's sequence from that state with the
parameters it learns: truncated back-propagation through time over the round's alpha steps, in one
``jax.lax.scan`` (``unroll``). PPO's minibatches are then sets of whole env sequences, or, where there are fewer
envs than minibatches, of equal chunks of them, each from the behaviour parameters' state at its start
(``agents.batching.chunk_sequences``).

A state is one float32 array ``[B, S]`` per batch: each path's GRU hidden state (``rnn_size``) or LSTM cell and
hidden states (``2 * rnn_size``), the paths' side by side, so storages, padding and checkpoints handle one array.
"""

from __future__ import annotations

import dataclasses

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from agents import networks
from agents.distributions import Factored, StateDependentGaussian
from agents.hyperparams import hyperparameter
from agents.types import SequenceObs

CELLS = ("lstm", "gru")
RECURRENT_CHOICES = ("none", *CELLS)
RNN_INPUTS = ("auto", "obs", "torso")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecurrentHyperparameters:
    """Whether the actor-critic has memory (``recurrent_network``) and how wide it is."""

    recurrent: str = hyperparameter(
        "none", "A recurrent core after the torso: lstm or gru (flax's cells), its state kept per env and reset at "
        "each episode's start; none: feed-forward (default).", choices=RECURRENT_CHOICES, group="recurrent")
    rnn_size: int = hyperparameter(128, "Units of the recurrent core (default 128).", group="recurrent")
    rnn_input: str = hyperparameter(
        "auto", "What the recurrent core reads: obs = the observation, the MLP after the core (sb3-contrib's "
        "RecurrentPPO; vector observations only); torso = the torso's features (CNN or MLP) and the heads after it; "
        "auto (default) = obs for vectors, torso for images.", choices=RNN_INPUTS, group="recurrent")


class RecurrentActorCritic(nn.Module):
    """``ActorCritic``'s torsos, a recurrent ``cell`` of ``rnn_size`` units after each (or, ``reads_obs``, before
    each MLP torso), and its heads.

    As in ``ActorCritic``, an MLP task has two paths, the actor's (torso, cell, policy head) and the critic's (torso,
    cell, value head), so the value loss does not shape the policy's memory (Stable-Baselines3's ``RecurrentPPO``
    keeps a critic LSTM of its own for the same reason); an image task shares one CNN torso and one cell between
    both heads (CleanRL's ``ppo_atari_lstm.py``). A path's state is its cell's; the env's state is the paths' side
    by side.

    ``__call__(obs [B, ...], carry [B, S], first [B]) -> (policy_out, value [B], carry')`` is one step: the state is
    zeroed where ``first`` is 1 before the cells read it. ``encode``, ``step`` and ``heads`` are its three parts,
    which ``unroll`` runs over a sequence with the torsos and heads on all ``T * B`` rows at once. With ``reads_obs``
    (an MLP task) ``encode`` passes the observation to each path's cell and ``heads`` runs each path's MLP torso on
    its cell's output.
    """

    torso: str
    action_dim: int
    continuous: bool
    cell: str = "lstm"
    rnn_size: int = 128
    hidden_sizes: tuple = (64, 64)
    hidden: int = networks.BA3C_DEFAULT_HIDDEN
    activation: str = "tanh"
    orthogonal_init: bool = True
    log_std_init: float = 0.0
    conv_plan: networks.ConvPlan | None = None
    action_nvec: tuple = ()
    reads_obs: bool = False
    use_sde: bool = False

    def setup(self):
        if self.torso == "mlp":
            self.encoders = [networks.MLPTorso(self.hidden_sizes, self.activation, self.orthogonal_init)
                             for _ in range(2)]
        else:
            self.encoders = [networks.image_torso_module(self.torso, self.conv_plan, self.hidden, name=None)]
        cell_cls = nn.OptimizedLSTMCell if self.cell == "lstm" else nn.GRUCell
        self.cores = [cell_cls(self.rnn_size) for _ in self.encoders]
        orthogonal = self.orthogonal_init or self.torso != "mlp"
        head_width = sum(self.action_nvec) if self.action_nvec else self.action_dim
        self.value_head = networks._dense(1, networks._VALUE_HEAD_GAIN, orthogonal)
        self.policy_head = networks._dense(head_width, networks._POLICY_HEAD_GAIN, orthogonal)
        if self.continuous:  # gSDE's log-std is one per (feature of the policy head's input, action)
            features = self.hidden_sizes[-1] if self.reads_obs else self.rnn_size
            shape = (features, self.action_dim) if self.use_sde else (self.action_dim,)
            self.log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), shape, jnp.float32)

    @property
    def carry_size(self) -> int:
        """S, the width of one env's state."""
        return carry_size(self.cell, self.rnn_size, self.torso)

    def encode(self, obs: jax.Array) -> jax.Array:
        """The torsos' features of an observation batch, the paths' side by side: ``[B, paths * F]``; with
        ``reads_obs``, the observation once per path."""
        if self.reads_obs:
            flat = obs.reshape((obs.shape[0], -1)).astype(jnp.float32)
            return jnp.concatenate([flat] * len(self.encoders), axis=-1)
        return jnp.concatenate([encoder(obs) for encoder in self.encoders], axis=-1)

    def step(self, features: jax.Array, carry: jax.Array, first: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One step of each path's cell: its state zeroed where ``first``, then ``(carry' [B, S], outputs
        [B, paths * rnn_size])``."""
        carry = jnp.where(first[:, None] > 0, 0.0, carry)
        paths = len(self.cores)
        new_carries, outputs = [], []
        for core, x, state in zip(self.cores, jnp.split(features, paths, axis=-1), jnp.split(carry, paths, axis=-1),
                                  strict=True):
            if self.cell == "lstm":
                c, h = jnp.split(state, 2, axis=-1)
                (c, h), out = core((c, h), x)
                state = jnp.concatenate([c, h], axis=-1)
            else:
                state, out = core(state, x)
            new_carries.append(state)
            outputs.append(out)
        return jnp.concatenate(new_carries, axis=-1), jnp.concatenate(outputs, axis=-1)

    def heads(self, x: jax.Array):
        """``(policy_out, value [B])`` of the cells' outputs (the first path's to the policy, the last's to the
        value; with ``reads_obs``, through the path's MLP torso first), in ``ActorCritic``'s forms."""
        paths = jnp.split(x, len(self.cores), axis=-1)
        if self.reads_obs:
            paths = [encoder(path) for encoder, path in zip(self.encoders, paths, strict=True)]
        value = self.value_head(paths[-1])[:, 0].astype(jnp.float32)
        head = self.policy_head(paths[0]).astype(jnp.float32)
        if self.action_nvec:
            return Factored(head, tuple(self.action_nvec)), value
        if not self.continuous:
            return head, value
        if self.use_sde:
            return StateDependentGaussian.of_features(head, paths[0], self.log_std), value
        return (head, jnp.broadcast_to(self.log_std, head.shape)), value

    def __call__(self, obs: jax.Array, carry: jax.Array, first: jax.Array):
        carry, x = self.step(self.encode(obs), carry, first)
        policy_out, value = self.heads(x)
        return policy_out, value, carry


def carry_size(cell: str, rnn_size: int, torso: str) -> int:
    """The width S of one env's state: each path's (two for an MLP torso, one for a CNN) LSTM cell and hidden
    states side by side, or GRU hidden state."""
    return (2 if torso == "mlp" else 1) * (2 * rnn_size if cell == "lstm" else rnn_size)


def recurrent_network(network: networks.ActorCritic, cell: str, rnn_size: int,
                      rnn_input: str = "auto") -> RecurrentActorCritic:
    """``network``'s torso and heads (``make_network``'s choice for the task) with a ``cell`` core: before an MLP
    torso (``rnn_input`` obs, or auto), between the torso and the heads (torso, or auto for a CNN)."""
    if cell not in CELLS:
        raise ValueError(f"cell must be one of {', '.join(CELLS)}, got {cell!r}.")
    if rnn_size < 1:
        raise ValueError(f"rnn_size must be >= 1, got {rnn_size}.")
    if rnn_input not in RNN_INPUTS:
        raise ValueError(f"rnn_input must be one of {', '.join(RNN_INPUTS)}, got {rnn_input!r}.")
    if network.image_shape:
        raise ValueError("a recurrent core reads one torso's features; a Dict of an image and vectors has two")
    if rnn_input == "obs" and network.torso != "mlp":
        raise ValueError("--rnn_input=obs needs vector observations: a recurrent core reads an image through its CNN "
                         "(--rnn_input=torso, or auto)")
    return RecurrentActorCritic(
        torso=network.torso, action_dim=network.action_dim, continuous=network.continuous, cell=cell,
        rnn_size=int(rnn_size), hidden_sizes=network.hidden_sizes, hidden=network.hidden,
        activation=network.activation, orthogonal_init=network.orthogonal_init, log_std_init=network.log_std_init,
        conv_plan=network.conv_plan, action_nvec=network.action_nvec,
        reads_obs=network.torso == "mlp" and rnn_input != "torso", use_sde=network.use_sde,
    )


def memory_of(network) -> RecurrentActorCritic | None:
    """The recurrent actor-critic in ``network``: itself, or the one a wrapper holds as ``network.network``
    (``agents.normalization.NormalizedNetwork``); None for a feed-forward network."""
    inner = getattr(network, "network", network)
    return inner if isinstance(inner, RecurrentActorCritic) else None


def init_inputs(network: RecurrentActorCritic, obs: jax.Array) -> tuple:
    """The arguments ``network.init`` takes after its key for an observation batch ``obs`` ``[B, ...]``."""
    batch = obs.shape[0]
    return obs, jnp.zeros((batch, network.carry_size), jnp.float32), jnp.ones((batch,), jnp.float32)


def unroll(network: RecurrentActorCritic, params, sequences: SequenceObs):
    """``(policy_out [T * B, ...], values [T * B], states [T, B, S])`` of whole env sequences, time-major rows
    ``t * B + b``: the torso and heads on all rows at once, the cell in one ``jax.lax.scan`` over time; ``states[t]``
    is the state entering step t (before the reset where ``first[t]``)."""
    obs, first = sequences.obs, sequences.first.astype(jnp.float32)
    num_steps, num_envs = first.shape
    chex.assert_shape(sequences.carry, (num_envs, network.carry_size))
    flat_obs = obs.reshape((num_steps * num_envs, *obs.shape[2:]))
    features = network.apply(params, flat_obs, method=RecurrentActorCritic.encode)
    features = features.reshape((num_steps, num_envs, *features.shape[1:]))

    def cell_step(carry, inputs):  # -> (carry', (output, the state entering the step))
        x, first_t = inputs
        new_carry, output = network.apply(params, x, carry, first_t, method=RecurrentActorCritic.step)
        return new_carry, (output, carry)

    _, (outputs, states) = jax.lax.scan(cell_step, sequences.carry.astype(jnp.float32), (features, first))
    policy_out, values = network.apply(params, outputs.reshape((num_steps * num_envs, -1)),
                                       method=RecurrentActorCritic.heads)
    return policy_out, values, states


@dataclasses.dataclass(frozen=True)
class SequenceApply:
    """The learner's view of a recurrent network: ``apply_fn(params, SequenceObs) -> (policy_out [T * B], values
    [T * B])``, in the shape of the feed-forward ``apply_fn(params, obs [N])`` (``agents.ppo``, ``agents.a2c``);
    ``unroll`` also gives the states ``[T, B, S]`` entering each step, from which ``agents.batching`` starts the
    chunks of long sequences."""

    network: RecurrentActorCritic

    def __call__(self, params, sequences: SequenceObs):
        policy_out, values, _ = unroll(self.network, params, sequences)
        return policy_out, values

    def unroll(self, params, sequences: SequenceObs):
        return unroll(self.network, params, sequences)


def sequence_apply(network: RecurrentActorCritic) -> SequenceApply:
    """The ``apply_fn`` the updates take for ``network`` (``SequenceApply``)."""
    return SequenceApply(network)

