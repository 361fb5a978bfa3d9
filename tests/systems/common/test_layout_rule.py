"""The layout rule (`systems.common.layout_rule`): on an accelerator and on a many-core CPU the run's envs, steps per
round and actor threads are fitted with the round's env steps kept; on the presets' 2-core CPU, with a size flag or
with `--layout=preset`, the literal preset, bit for bit. Anakin takes the accelerator branch only; BA3C grows its
envs per device with the rollout kept and the effective batch capped; GALA records its preset. Machines are faked:
the rule reads only the backend's name and the core count."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import launch.anakin
import launch.ba3c
import launch.hts
from systems.anakin import system as anakin
from systems.ba3c import system as ba3c
from systems.common import layout_rule
from systems.common.config import ConfigError
from systems.common.layout_rule import Machine, Sizes, fit, fit_batch
from systems.gala import system as gala
from systems.hts import system as hts
from tests.fixtures import launcher_config, read_config, tiny_hts

_PRESETS = st.builds(Sizes, num_envs=st.integers(1, 256), sync_interval=st.integers(1, 256),
                     num_actors=st.integers(1, 4))
_MACHINES = st.builds(Machine, backend=st.sampled_from(["cpu", "gpu", "tpu"]), cores=st.integers(1, 128))


@settings(max_examples=300, deadline=None)
@given(preset=_PRESETS, machine=_MACHINES)
def test_a_fit_keeps_the_rounds_env_steps_and_only_grows_the_envs_by_multiples(preset, machine):
    sizes = fit(preset, machine).sizes
    assert sizes.num_envs * sizes.sync_interval == preset.num_envs * preset.sync_interval
    assert sizes.num_envs % preset.num_envs == 0 and sizes.num_envs >= preset.num_envs
    assert preset.num_actors <= sizes.num_actors <= max(preset.num_actors, sizes.num_envs)
    if machine.backend != "cpu":
        assert sizes.num_envs <= max(preset.num_envs, layout_rule.ACCELERATOR_ENVS)
    else:
        assert sizes.num_envs <= preset.num_envs * max(1, machine.cores // layout_rule.PRESET_CORES)
    # Only the accelerator's fit picks the forward pass: one chunk of every env; elsewhere the system's default.
    fitted_on_accelerator = fit(preset, machine).rule == "accelerator"
    assert sizes.inference_batch == (sizes.num_envs if fitted_on_accelerator else 0)


@settings(max_examples=200, deadline=None)
@given(preset=_PRESETS, cores=st.integers(1, layout_rule.PRESET_CORES), backend=st.sampled_from(["cpu", "gpu"]))
def test_the_presets_machine_and_layout_preset_keep_the_preset(preset, cores, backend):
    for result in (fit(preset, Machine("cpu", cores)), fit(preset, Machine(backend, 64), "preset")):
        assert (result.rule, result.sizes) == ("preset", preset)


@pytest.mark.parametrize("machine, rule, expected", [
    (Machine("gpu", 16), "accelerator", Sizes(128, 8, 4, 128)),  # the layout measured on an H200
    (Machine("cpu", 16), "many-core cpu", Sizes(64, 16, 2)),
    (Machine("cpu", 64), "many-core cpu", Sizes(256, 4, 4)),
    (Machine("cpu", 2), "preset", Sizes(8, 128, 1)),
])
def test_breakouts_preset_on_each_machine(machine, rule, expected):
    result = fit(Sizes(8, 128, 1), machine)
    assert (result.rule, result.sizes) == (rule, expected)
    assert expected.describe() in result.describe()


def test_a_multi_process_job_keeps_the_preset(tmp_path):
    config = tiny_hts(tmp_path, layout="auto")
    fitted_config, result = layout_rule.applied(config, Machine("gpu", 16), processes=2)
    assert fitted_config == config and result.rule == "preset" and "2 processes" in result.why


def test_the_launcher_asks_for_the_rule_unless_a_size_is_given():
    assert launcher_config(launch.hts, "--env=CartPole-v1").layout == "auto"
    for flag in ("--num_envs=8", "--sync_interval=32", "--num_actors=2"):
        assert launcher_config(launch.hts, "--env=CartPole-v1", flag).layout == "preset", flag
    assert launcher_config(launch.hts, "--env=CartPole-v1", "--layout=preset").layout == "preset"
    assert dataclasses.fields(hts.HTSConfig)  # a config made in code keeps its sizes:
    assert tiny_hts("unused").layout == "preset"


def _run(tmp_path, name, machine, monkeypatch, **overrides):
    monkeypatch.setattr(layout_rule, "this_machine", lambda: machine)
    config = tiny_hts(tmp_path / name, num_envs=4, sync_interval=16, eval_episodes=0, **overrides)
    summary = hts.run(config)
    return summary, read_config(tmp_path / name)


def test_a_faked_accelerator_run_is_fitted_and_says_so_and_the_2_core_cpu_is_unchanged(tmp_path, monkeypatch):
    summary, saved = _run(tmp_path, "gpu", Machine("gpu", 16), monkeypatch, layout="auto")
    assert (saved["num_envs"], saved["sync_interval"], saved["num_actors"], saved["inference_batch"]) == (64, 1, 4, 64)
    assert saved["plan"]["layout"]["rule"] == "accelerator" and summary["env_steps"] == 6 * 64
    assert saved["plan"]["batches"]["inference"] == 64 and "forward passes of 64" in saved["plan"]["layout"]["sizes"]

    auto, saved = _run(tmp_path, "cpu-auto", Machine("cpu", 2), monkeypatch, layout="auto")
    literal, _ = _run(tmp_path, "cpu-preset", Machine("cpu", 2), monkeypatch)
    assert (saved["num_envs"], saved["sync_interval"]) == (4, 16) and saved["plan"]["layout"]["rule"] == "preset"
    assert auto["param_fingerprint"] == literal["param_fingerprint"]


# ------------------------------------------------------------------------------------------ Anakin, BA3C, GALA


@settings(max_examples=200, deadline=None)
@given(preset=_PRESETS, machine=_MACHINES, devices=st.integers(1, 8))
def test_anakin_is_fitted_on_an_accelerator_and_keeps_its_preset_on_every_cpu(preset, machine, devices):
    preset = dataclasses.replace(preset, num_envs=preset.num_envs * devices, num_actors=0)  # no actor threads
    result = fit(preset, machine, scale_on_cpu=False, split_over=devices)
    sizes = result.sizes
    if machine.backend == "cpu":
        assert (result.rule, sizes) == ("preset", preset)
    else:
        assert sizes.num_envs * sizes.sync_interval == preset.num_envs * preset.sync_interval
        assert sizes.num_envs % devices == 0 and sizes.num_envs % preset.num_envs == 0 and sizes.num_actors == 0
        assert preset.num_envs <= sizes.num_envs <= max(preset.num_envs, layout_rule.ACCELERATOR_ENVS)
        assert (result.rule == "preset") == (sizes == preset)


@settings(max_examples=300, deadline=None)
@given(preset=_PRESETS, machine=_MACHINES, devices=st.integers(1, 16))
def test_ba3c_grows_its_envs_per_device_keeps_the_rollout_and_caps_the_effective_batch(preset, machine, devices):
    preset = dataclasses.replace(preset, num_actors=0)
    result = fit_batch(preset, machine, devices=devices)
    sizes = result.sizes
    assert sizes.sync_interval == preset.sync_interval and sizes.num_actors == 0
    assert sizes.num_envs % preset.num_envs == 0 and sizes.num_envs >= preset.num_envs
    if sizes != preset:
        assert devices * sizes.num_envs * sizes.sync_interval <= layout_rule.BATCH_MOST
        assert sizes.num_envs <= preset.num_envs * max(1, machine.cores // layout_rule.PRESET_CORES) or (
            machine.backend != "cpu" and sizes.num_envs <= layout_rule.ACCELERATOR_ENVS)
    if machine.backend == "cpu" and machine.cores <= layout_rule.PRESET_CORES:
        assert (result.rule, sizes) == ("preset", preset)
    assert fit_batch(preset, machine, "preset", devices).sizes == preset


@pytest.mark.parametrize("machine, devices, rule, envs", [
    (Machine("gpu", 16), 1, "accelerator", 128),  # local batch 640
    (Machine("gpu", 16), 8, "accelerator", 48),  # effective batch 8 x 48 x 5 = 1,920 <= 2,048
    (Machine("cpu", 12), 1, "many-core cpu", 96),  # 480: seed 001's one 12-core node trained at 512
    (Machine("cpu", 64), 1, "many-core cpu", 400),  # capped: 2,000
    (Machine("cpu", 2), 1, "preset", 16),
])
def test_ba3cs_preset_on_each_machine(machine, devices, rule, envs):
    result = fit_batch(Sizes(16, 5, 0), machine, devices=devices)
    assert (result.rule, result.sizes) == (rule, Sizes(envs, 5, 0))


def test_the_ba3c_and_anakin_launchers_ask_for_the_rule_unless_a_size_is_given():
    assert launcher_config(launch.ba3c, "--env=CartPole-v1").layout == "auto"
    for flag in ("--local_batch=40", "--sync_interval=10", "--layout=preset"):
        assert launcher_config(launch.ba3c, "--env=CartPole-v1", flag).layout == "preset", flag
    assert launcher_config(launch.anakin, "--env=gymnax/CartPole-v1").layout == "auto"
    for flag in ("--num_envs=16", "--sync_interval=32", "--layout=preset"):
        assert launcher_config(launch.anakin, "--env=gymnax/CartPole-v1", flag).layout == "preset", flag


def _ba3c(tmp_path, name, machine, monkeypatch, **overrides):
    monkeypatch.setattr(layout_rule, "this_machine", lambda: machine)
    values = dict(env_id="CartPole-v1", seed=3, sync_interval=5, local_batch=20, total_steps=2 * 640, eval_episodes=0,
                  quiet=True, logdir=str(tmp_path / name))
    config = ba3c.BA3CConfig(**dict(values, **overrides))
    return ba3c.run(config), read_config(tmp_path / name)


def test_a_faked_accelerator_fits_ba3cs_batch_and_the_2_core_cpu_keeps_it_bit_for_bit(tmp_path, monkeypatch):
    summary, saved = _ba3c(tmp_path, "gpu", Machine("gpu", 16), monkeypatch, layout="auto")
    assert saved["local_batch"] == 640 and saved["plan"]["envs_per_device"] == 128  # the preset's 4 envs x 32
    assert saved["plan"]["layout"]["rule"] == "accelerator" and summary["env_steps"] == 2 * 640

    auto, saved = _ba3c(tmp_path, "cpu-auto", Machine("cpu", 2), monkeypatch, layout="auto")
    literal, _ = _ba3c(tmp_path, "cpu-preset", Machine("cpu", 2), monkeypatch)
    assert saved["local_batch"] == 20 and saved["plan"]["layout"]["rule"] == "preset"
    assert auto["param_fingerprint"] == literal["param_fingerprint"]


def _anakin(tmp_path, name, machine, monkeypatch, **overrides):
    monkeypatch.setattr(layout_rule, "this_machine", lambda: machine)
    values = dict(env_id="gymnax/CartPole-v1", num_envs=4, sync_interval=16, total_steps=3 * 64, num_epochs=1,
                  num_minibatches=2, checkpoint_every=64, eval_episodes=0, quiet=True, logdir=str(tmp_path / name))
    config = anakin.AnakinConfig(**dict(values, **overrides))
    first = tmp_path / name / f"seed_{config.seed}" if config.num_seeds > 1 else tmp_path / name
    return anakin.run(config), read_config(first)


def test_a_faked_accelerator_fits_anakins_envs_and_a_cpu_keeps_them_bit_for_bit(tmp_path, monkeypatch):
    summary, saved = _anakin(tmp_path, "gpu", Machine("gpu", 16), monkeypatch, layout="auto")
    assert (saved["num_envs"], saved["sync_interval"]) == (64, 1) and saved["plan"]["layout"]["rule"] == "accelerator"
    assert summary["env_steps"] == 3 * 64

    auto, saved = _anakin(tmp_path, "cpu-auto", Machine("cpu", 64), monkeypatch, layout="auto")
    literal, _ = _anakin(tmp_path, "cpu-preset", Machine("cpu", 64), monkeypatch)
    assert (saved["num_envs"], saved["sync_interval"]) == (4, 16) and saved["plan"]["layout"]["rule"] == "preset"
    assert auto["param_fingerprint"] == literal["param_fingerprint"]


def test_gala_records_its_preset_as_its_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(layout_rule, "this_machine", lambda: Machine("gpu", 16))
    config = gala.GALAConfig(env_id="CartPole-v1", seed=5, sync_interval=5, envs_per_learner=2, num_learners=2,
                             total_steps=2 * 20, eval_episodes=0, quiet=True, logdir=str(tmp_path))
    gala.run(config)
    layout = read_config(tmp_path)["plan"]["layout"]
    assert (layout["rule"], layout["sizes"], layout["why"]) == ("preset", "2 envs x 5 steps",
                                                                 layout_rule.GALA_PRESET_WHY)


# ------------------------------------------------------------------------------------------ resumed runs


def test_a_run_fitted_on_an_accelerator_resumes_on_a_2_core_cpu_with_its_sizes(tmp_path, monkeypatch):
    _run(tmp_path, "run", Machine("gpu", 16), monkeypatch, layout="auto", checkpoint_every=64)
    summary, saved = _run(tmp_path, "run", Machine("cpu", 2), monkeypatch, layout="auto", resume=True,
                          total_steps=2 * 6 * 64)
    assert (saved["num_envs"], saved["sync_interval"], saved["num_actors"], saved["inference_batch"]) == (64, 1, 4, 64)
    assert saved["plan"]["layout"]["rule"] == "resumed" and summary["env_steps"] == 2 * 6 * 64


def test_a_given_inference_batch_stands_on_an_accelerator_and_a_resumed_run_checks_it(tmp_path, monkeypatch):
    config = tiny_hts(tmp_path, layout="auto", env_id="Breakout-v5", num_envs=8, sync_interval=128)
    fitted, result = layout_rule.applied(config, Machine("gpu", 16))
    assert (fitted.num_envs, fitted.inference_batch) == (128, 128)
    given, result = layout_rule.applied(dataclasses.replace(config, inference_batch=32), Machine("gpu", 16))
    assert (given.num_envs, given.inference_batch) == (128, 32) and "forward passes of" not in result.describe()
    _run(tmp_path, "run", Machine("gpu", 16), monkeypatch, layout="auto", checkpoint_every=64)
    with pytest.raises(ConfigError, match="--inference_batch=32 differs from the run's 64"):
        _run(tmp_path, "run", Machine("cpu", 2), monkeypatch, layout="auto", resume=True, total_steps=2 * 6 * 64,
             inference_batch=32)


def test_ba3c_and_anakin_runs_resume_with_the_sizes_they_started_with(tmp_path, monkeypatch):
    _ba3c(tmp_path, "ba3c", Machine("cpu", 2), monkeypatch, layout="auto", checkpoint_every=640)
    summary, saved = _ba3c(tmp_path, "ba3c", Machine("gpu", 16), monkeypatch, layout="auto", resume=True,
                           total_steps=3 * 640)
    assert saved["local_batch"] == 20 and saved["plan"]["layout"]["rule"] == "resumed"
    assert summary["env_steps"] == 3 * 640

    _anakin(tmp_path, "anakin", Machine("gpu", 16), monkeypatch, layout="auto", num_seeds=2)
    summary, saved = _anakin(tmp_path, "anakin", Machine("cpu", 2), monkeypatch, layout="auto", num_seeds=2,
                             resume=True, total_steps=6 * 64)
    assert summary["env_steps_per_agent"] == 6 * 64 and (saved["num_envs"], saved["sync_interval"]) == (64, 1)


def test_a_ba3c_run_too_short_for_its_fitted_batch_says_the_rule_chose_it(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"less than one round .*--local_batch=640 is the layout rule's choice "
                                          r"\(accelerator, gpu, 16 cores\), not a flag: --layout=preset keeps the "
                                          r"preset's 20"):
        _ba3c(tmp_path, "gpu", Machine("gpu", 16), monkeypatch, layout="auto", total_steps=600)
    summary, _ = _ba3c(tmp_path, "cpu", Machine("gpu", 16), monkeypatch, layout="preset", total_steps=600)
    assert summary["env_steps"] == 600


def test_batches_are_checked_against_the_envs_the_rule_gives_not_the_presets(tmp_path, monkeypatch):
    """`--inference_batch=64` beside Breakout's 8-env preset is a chunk of the 128 envs on an accelerator, and too
    large on the 2-core CPU, where the preset's 8 envs stay: the check follows the fit."""
    config = tiny_hts(tmp_path, layout="auto", num_envs=8, sync_interval=128, inference_batch=64, total_steps=2048)
    hts.validate(config)  # not yet refused: the rule has not sized the envs
    monkeypatch.setattr(layout_rule, "this_machine", lambda: Machine("gpu", 16))
    assert hts._resolve_layout(config)[0].num_envs == 128
    monkeypatch.setattr(layout_rule, "this_machine", lambda: Machine("cpu", 2))
    with pytest.raises(ConfigError, match="--inference_batch=64 exceeds --num_envs=8"):
        hts._resolve_layout(config)
