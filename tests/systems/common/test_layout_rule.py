"""The layout rule (`systems.common.layout_rule`): on an accelerator and on a many-core CPU the run's envs, steps per
round and actor threads are fitted with the round's env steps kept; on the presets' 2-core CPU, with a size flag or
with `--layout=preset`, the literal preset, bit for bit. Machines are faked: the rule reads only the backend's name
and the core count."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import launch.hts
from systems.common import layout_rule
from systems.common.layout_rule import Machine, Sizes, fit
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


@settings(max_examples=200, deadline=None)
@given(preset=_PRESETS, cores=st.integers(1, layout_rule.PRESET_CORES), backend=st.sampled_from(["cpu", "gpu"]))
def test_the_presets_machine_and_layout_preset_keep_the_preset(preset, cores, backend):
    for result in (fit(preset, Machine("cpu", cores)), fit(preset, Machine(backend, 64), "preset")):
        assert (result.rule, result.sizes) == ("preset", preset)


@pytest.mark.parametrize("machine, rule, expected", [
    (Machine("gpu", 16), "accelerator", Sizes(128, 8, 4)),  # the layout measured on an H200
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
    assert (saved["num_envs"], saved["sync_interval"], saved["num_actors"]) == (64, 1, 4)
    assert saved["plan"]["layout"]["rule"] == "accelerator" and summary["env_steps"] == 6 * 64

    auto, saved = _run(tmp_path, "cpu-auto", Machine("cpu", 2), monkeypatch, layout="auto")
    literal, _ = _run(tmp_path, "cpu-preset", Machine("cpu", 2), monkeypatch)
    assert (saved["num_envs"], saved["sync_interval"]) == (4, 16) and saved["plan"]["layout"]["rule"] == "preset"
    assert auto["param_fingerprint"] == literal["param_fingerprint"]
