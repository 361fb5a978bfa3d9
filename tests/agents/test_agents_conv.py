"""`agents.conv`: every formulation of the CNNs' convolutions computes what `flax.linen.Conv` computes with
the same parameters, forward and backward, in either layout and with a backward form different from its forward form;
the networks keep their parameters and their function under every plan, and the default plan follows the backend."""

import functools

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import conv, networks

# (input [H, W, C], features, kernel, stride): the Nature CNN's and the GFootball CNN's layers.
LAYERS = [((84, 84, 4), 32, 8, 4), ((20, 20, 32), 64, 4, 2), ((9, 9, 64), 64, 3, 1),
          ((72, 96, 4), 32, 8, 4), ((17, 23, 32), 64, 4, 2), ((7, 10, 64), 64, 3, 1)]


def _forms(kernel, stride):
    return [f for f in conv.FORMS if f not in conv.STRIDE_DIVIDES_KERNEL or kernel % stride == 0]


def _apply(form, backward, x, kernel, bias, *, stride):
    """NHWC in, NHWC out, whatever layout the forms take."""
    if conv.channels_major(form):
        return conv.from_channels_major(conv.conv(conv.to_channels_major(x), kernel, bias, stride, forward=form,
                                                  backward=backward))
    return conv.conv(x, kernel, bias, stride, forward=form, backward=backward)


@pytest.mark.parametrize("shape,features,k,stride", LAYERS)
@pytest.mark.slow
def test_every_form_is_flax_conv_forward_and_backward(shape, features, k, stride):
    x = jax.random.normal(jax.random.PRNGKey(0), (2, *shape))
    reference = nn.Conv(features, (k, k), strides=(stride, stride), padding="VALID")
    params = reference.init(jax.random.PRNGKey(1), x)
    params = jax.tree.map(lambda p: p + 0.1 * jax.random.normal(jax.random.PRNGKey(2), p.shape), params)
    kernel, bias = params["params"]["kernel"], params["params"]["bias"]
    cotangent = jax.random.normal(jax.random.PRNGKey(3), reference.apply(params, x).shape)

    def value_and_grads(apply):
        """(output, d<output, cotangent>/d(x, kernel, bias)), jitted."""
        def loss(x, kernel, bias):
            return jnp.sum(apply(x, kernel, bias) * cotangent)

        return jax.jit(lambda x, kernel, bias: (apply(x, kernel, bias),
                                                jax.grad(loss, argnums=(0, 1, 2))(x, kernel, bias)))(x, kernel, bias)

    expected, expected_grads = value_and_grads(
        lambda x, kernel, bias: reference.apply({"params": {"kernel": kernel, "bias": bias}}, x))
    forms = _forms(k, stride)
    # Every form with its own gradient; the mixing (a custom_vjp) under one pair of each layout.
    pairs = [(f, f) for f in forms] + [("direct", "slices"), ("cm_slices", "cm_space_to_depth" if k % stride == 0
                                                              else "cm_slices")]
    for forward, backward in pairs:
        got, grads = value_and_grads(functools.partial(_apply, forward, backward, stride=stride))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=forward)
        for name, value, want in zip(("input", "kernel", "bias"), grads, expected_grads, strict=True):
            np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-3, err_msg=f"{forward}/{backward}: {name}")


def test_mixed_forms_run_the_forward_form_and_the_backward_forms_gradient():
    """The custom_vjp's jaxpr holds the forward form's program; its gradient the backward form's."""
    x, kernel, bias = jnp.ones((2, 9, 9, 8)), jnp.ones((3, 3, 8, 4)), jnp.zeros(4)
    forward = str(jax.make_jaxpr(lambda x: conv.conv(x, kernel, bias, 1, forward="slices", backward="direct"))(x))
    assert "concatenate" in forward and "conv_general_dilated" not in forward
    grad = str(jax.make_jaxpr(jax.grad(lambda k: jnp.sum(conv.conv(x, k, bias, 1, forward="slices",
                                                                   backward="direct"))))(kernel))
    assert "conv_general_dilated" in grad


def test_bad_forms_are_refused():
    x, kernel, bias = jnp.ones((1, 9, 9, 2)), jnp.ones((3, 3, 2, 2)), jnp.zeros(2)
    with pytest.raises(ValueError, match="unknown convolution form 'fft'"):
        conv.conv(x, kernel, bias, 1, forward="fft")
    with pytest.raises(ValueError, match="different layouts"):
        conv.conv(x, kernel, bias, 1, forward="direct", backward="cm_slices")
    with pytest.raises(ValueError, match="divisible by the stride"):
        conv.conv(x, kernel, bias, 2, forward="space_to_depth")


PLANS = {
    "nhwc_mixed": (networks.LayerForms("slices", "shift_add", "slices"),
                   networks.LayerForms("space_to_depth", "shift_add", "direct"),
                   networks.LayerForms("direct", "direct", "slices")),
}


@pytest.mark.parametrize("torso,shape", [("nature_cnn", (4, 84, 84)), ("gfootball_cnn", (72, 96, 4)),
                                         ("ba3c", (4, 84, 84))])
@pytest.mark.slow
def test_networks_keep_parameters_and_function_under_every_plan(torso, shape):
    """The same parameter tree (names, shapes, initial values) and the same outputs and gradients, up to float
    rounding, at the actors' batch and at the learner's (above SMALL_BATCH)."""
    rng = np.random.default_rng(0)
    layers = 4 if torso == "ba3c" else 3
    plans = {"direct": networks.uniform_conv_plan("direct", layers),
             "cpu_default": networks.CPU_CONV_PLANS[torso.removesuffix("_cnn")]}
    if torso != "ba3c":  # BA3C's own CPU plan is the NHWC mix; its channels-major forms cost gigabytes at 84x84
        plans["nhwc_mixed"] = PLANS["nhwc_mixed"]
        plans["channels_major"] = (networks.LayerForms("direct", "cm_slices", "cm_slices"),) * layers
    reference = networks.ActorCritic(torso=torso, action_dim=5, continuous=False, conv_plan=plans["direct"])
    small = jnp.asarray(rng.integers(0, 255, (4, *shape)), jnp.uint8)
    large = jnp.asarray(rng.integers(0, 255, (networks.SMALL_BATCH + 1, *shape)), jnp.uint8)

    def init(model):  # one compiled program, not the eager ops of every form (seconds at the suite's -O0)
        return jax.jit(model.init)(jax.random.PRNGKey(0), small)

    params = init(reference)

    def loss(model, params, obs):
        logits, value = model.apply(params, obs)
        return jnp.sum(jax.nn.log_softmax(logits)[:, 1]) + jnp.sum(value**2)

    expected_small = jax.jit(reference.apply)(params, small)
    expected_grad = jax.jit(jax.grad(functools.partial(loss, reference)))(params, large)  # the learner's regime
    for name, plan in plans.items():
        model = networks.ActorCritic(torso=torso, action_dim=5, continuous=False, conv_plan=plan)
        chex.assert_trees_all_equal(init(model), params)
        chex.assert_trees_all_close(jax.jit(model.apply)(params, small), expected_small, rtol=1e-4, atol=1e-5,
                                    custom_message=name)
        chex.assert_trees_all_close(jax.jit(jax.grad(functools.partial(loss, model)))(params, large), expected_grad,
                                    rtol=1e-3, atol=1e-4, custom_message=name)


def test_the_default_plan_follows_the_backend(monkeypatch):
    assert networks.default_conv_plan("nature") == networks.CPU_CONV_PLANS["nature"]  # this machine: CPU
    assert any(conv.channels_major(forms.forward) for forms in networks.CPU_CONV_PLANS["nature"])
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert networks.default_conv_plan("nature") == networks.uniform_conv_plan("direct")  # cuDNN's convolution
    assert networks.default_conv_plan("gfootball") == networks.uniform_conv_plan("direct")
    assert networks.default_conv_plan("ba3c") == networks.uniform_conv_plan("direct", layers=4)


@pytest.mark.slow
def test_a_plan_mixing_layouts_in_one_regime_is_refused():
    plan = (networks.LayerForms("direct", "cm_slices", "cm_slices"),) * 2 + (
        networks.LayerForms("direct", "direct", "direct"),)
    model = networks.ActorCritic(torso="nature_cnn", action_dim=3, continuous=False, conv_plan=plan)
    obs = jnp.zeros((4, 4, 84, 84), jnp.uint8)
    params = model.init(jax.random.PRNGKey(0), obs)  # the actors' regime is all NHWC: fine
    with pytest.raises(ValueError, match="mixes the channels-major and NHWC layouts"):
        model.apply(params, jnp.zeros((networks.SMALL_BATCH + 1, 4, 84, 84), jnp.uint8))
