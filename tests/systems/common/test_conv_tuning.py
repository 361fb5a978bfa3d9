"""Convolution plans chosen by timing on the running machine (`systems.common.conv_tuning`): the fastest candidate
wins, the choice is cached and reused without timing again, the run's hardware card names it, and accelerators,
multi-process jobs and `HTSRL_CONV_TUNING=off` keep the defaults."""

import json

import jax
import numpy as np
import pytest

from agents import networks
from systems.common import conv_tuning
from systems.common.config import ConfigError, TrainConfig, validate


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "conv_plans.json"
    monkeypatch.setenv("HTSRL_CONV_CACHE", str(path))
    monkeypatch.setenv("HTSRL_CONV_TUNING", "on")
    monkeypatch.setattr(conv_tuning, "_chosen", {})
    return path


def _timer(fastest: str, calls: list):
    def timer(name, plan):
        calls.append(name)
        return 0.01 if name == fastest else 0.05
    return timer


def test_a_timing_that_favours_another_form_changes_the_plan_and_the_choice_is_cached(cache):
    calls = []
    plan = conv_tuning.choose_plan("nature", (4, 84, 84), 256, timer=_timer("direct", calls), say=lambda line: None)
    assert calls == ["table", "direct", "space_to_depth"]
    expected = conv_tuning.candidates("nature")["direct"]
    assert plan == expected != networks.CPU_CONV_PLANS["nature"]
    # The actors' small-batch forms stay the table's in every candidate.
    assert [forms.actor for forms in plan] == [forms.actor for forms in networks.CPU_CONV_PLANS["nature"]]
    (entry,) = json.loads(cache.read_text()).values()
    assert entry["plan"] == "direct" and set(entry["ms"]) == {"table", "direct", "space_to_depth"}
    assert conv_tuning.chosen()["nature"]["source"] == "timed on this machine"

    again = []  # a second run reads the cache: no timing
    assert conv_tuning.choose_plan("nature", (4, 84, 84), 256, timer=_timer("table", again),
                                   say=lambda line: None) == expected
    assert again == [] and conv_tuning.chosen()["nature"]["source"].startswith("cached in")
    other = []  # another batch is another entry
    assert conv_tuning.choose_plan("nature", (4, 84, 84), 64, timer=_timer("table", other),
                                   say=lambda line: None) == networks.CPU_CONV_PLANS["nature"]
    assert other == ["table", "direct", "space_to_depth"] and len(json.loads(cache.read_text())) == 2


def test_a_failed_timing_is_skipped_and_all_failing_keeps_the_table(cache):
    def timer(name, plan):
        if name != "space_to_depth":
            raise RuntimeError("RESOURCE_EXHAUSTED: out of memory\nmore")
        return 0.1

    lines = []
    assert conv_tuning.choose_plan("gfootball", (72, 96, 4), 32, timer=timer, say=lines.append) == \
        conv_tuning.candidates("gfootball")["space_to_depth"]
    assert any("plan 'table' failed (RESOURCE_EXHAUSTED: out of memory)" in line for line in lines)

    def failing(name, plan):
        raise RuntimeError("out of memory")

    assert conv_tuning.choose_plan("ba3c", (4, 84, 84), 80, timer=failing, say=lambda line: None) == \
        networks.CPU_CONV_PLANS["ba3c"]


def test_accelerators_multi_process_jobs_and_tuning_off_keep_the_defaults(cache, monkeypatch):
    assert conv_tuning.plan_for("mlp", (4,), 64) is None
    monkeypatch.setenv("HTSRL_CONV_TUNING", "off")
    assert conv_tuning.plan_for("nature_cnn", (4, 84, 84), 256) is None
    monkeypatch.setenv("HTSRL_CONV_TUNING", "on")
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    assert conv_tuning.plan_for("nature_cnn", (4, 84, 84), 256) is None
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert conv_tuning.choose_plan("nature", (4, 84, 84), 256, timer=None) == networks.uniform_conv_plan("direct")
    assert not cache.exists()


@pytest.mark.slow
def test_the_real_timer_times_each_candidate_of_a_small_batch(cache):
    lines = []
    plan = conv_tuning.choose_plan("nature", (4, 84, 84), 33, say=lines.append)
    record = conv_tuning.chosen()["nature"]
    assert plan == conv_tuning.candidates("nature")[record["plan"]]
    assert all(ms > 0 for ms in record["ms"].values()) and len(record["ms"]) == 3


@pytest.mark.parametrize("choice, name", [("table", "table"), ("xla", "direct")])
def test_an_explicit_conv_plan_is_used_said_and_recorded_whatever_tuning_says(cache, monkeypatch, choice, name):
    said = []
    for tuning, processes in (("off", 1), ("on", 2)):
        monkeypatch.setenv("HTSRL_CONV_TUNING", tuning)
        monkeypatch.setattr(jax, "process_count", lambda processes=processes: processes)
        plan = conv_tuning.plan_for("nature_cnn", (4, 84, 84), 256, choice, say=said.append)
        assert plan == conv_tuning.candidates("nature")[name]
        assert conv_tuning.chosen()["nature"] == {"plan": name, "source": f"--conv_plan={choice}"}
    assert len(said) == 2 and f"--conv_plan={choice}" in said[0]
    assert conv_tuning.plan_for("mlp", (4,), 64, choice) is None
    assert not cache.exists()  # nothing was timed


def test_conv_plan_outside_the_choices_is_refused():
    with pytest.raises(ConfigError, match="--conv_plan must be one of auto, table, xla"):
        validate(TrainConfig(env_id="CartPole-v1", total_steps=8 * 128, conv_plan="fast"))


def test_a_packed_image_is_timed_at_its_image_shape_not_its_vector(cache, monkeypatch):
    seen = []
    monkeypatch.setattr(conv_tuning, "choose_plan", lambda network, obs_shape, batch, say: seen.append(obs_shape))
    image = (4, 84, 84)
    network = networks.make_network((int(np.prod(image)) + 3,), 4, False, image_shape=image)
    conv_tuning.with_plan(network, (int(np.prod(image)) + 3,), 32)
    assert seen == [image]
