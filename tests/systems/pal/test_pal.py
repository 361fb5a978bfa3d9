"""PAL (seed 003, section V): the update_interval gate, the Eq. 5 allocation, tiny end-to-end runs of every algorithm,
resume with the replay buffer, `--allocate=auto`, and bad input through the launcher (one `error:` line, exit 2)."""

import dataclasses
import math
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from launch import pal as launch_pal
from systems.common.concurrency import StopRequested
from systems.common.config import ConfigError
from systems.offpolicy.presets import PAL_PRESETS
from systems.pal import system
from systems.pal.allocate import choose_allocation, format_profile
from tests.fixtures import REPO_ROOT, assert_profile, launcher_config, read_config, read_summary, run_launcher, tiny_pal

REPO = REPO_ROOT


# ----------------------------------------------------------------------------------------------- the gate


def test_gate_holds_update_interval_between_threads():
    """Real threads: an actor adding 3 steps at a time and a learner; updates never run ahead of
    warmup + u * U collected steps, the actor never runs more than one step ahead of the due update, and the run
    takes exactly floor((total - warmup) / U) updates."""
    gate = system.RatioGate(update_interval=2.5, warmup=10, collected=0, updates=0, total_steps=400)
    stopping = threading.Event()
    violations = []

    def actor():
        while gate.actor_wait(stopping):
            with gate._cond:
                updates = gate.updates
                if gate.collected >= 10 + (updates + 1) * 2.5 + 3:
                    violations.append(("actor ahead", gate.collected, updates))
            gate.add_collected(3)
        gate.actors_finished()

    def learner():
        while gate.learner_wait(stopping):
            with gate._cond:
                if gate.collected < 10 + (gate.updates + 1) * 2.5:
                    violations.append(("learner early", gate.collected, gate.updates))
            time.sleep(0.0005)
            gate.add_update()

    threads = [threading.Thread(target=actor), threading.Thread(target=learner)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not violations
    assert gate.collected == 402  # 3 at a time past 400
    assert gate.updates == gate.total_updates == math.floor((400 - 10) / 2.5)


def test_gate_with_zero_interval_runs_free_and_stops_learners_after_collection():
    gate = system.RatioGate(update_interval=0, warmup=0, collected=0, updates=0, total_steps=10)
    stopping = threading.Event()
    assert gate.total_updates is None
    assert gate.actor_wait(stopping)
    gate.add_collected(4)
    assert gate.learner_wait(stopping)
    gate.add_update()
    gate.add_update()
    assert gate.actor_wait(stopping)  # never throttled
    gate.add_collected(8)
    assert not gate.actor_wait(stopping)
    assert not gate.learner_wait(stopping)  # collection is done


def test_gate_waiting_learner_unwinds_on_stop():
    gate = system.RatioGate(update_interval=1, warmup=5, collected=0, updates=0, total_steps=100)
    stopping = threading.Event()
    stopping.set()
    with pytest.raises(StopRequested):
        gate.learner_wait(stopping)


def test_gate_resumed_counts_from_the_restored_position():
    gate = system.RatioGate(update_interval=2, warmup=0, collected=1000, updates=400, total_steps=1100)
    assert gate.total_updates == 450
    assert not gate._due()
    gate.add_collected(2)
    assert gate._due()


# ----------------------------------------------------------------------------------------------- Eq. 5


def test_allocation_solves_eq5_on_synthetic_curves():
    actors = {x: 1000.0 * x for x in range(1, 8)}  # linear collection
    learners = {x: 400.0 * math.sqrt(x) for x in range(1, 8)}  # sub-linear learning
    choice = choose_allocation(actors, learners, cores=8, update_interval=2.0, tolerance=0.0)
    best = min(
        ((xa, xl) for xa in actors for xl in learners if xa + xl <= 8),
        key=lambda p: abs(math.log(actors[p[0]] / (2.0 * learners[p[1]]))),
    )
    assert (choice.actors, choice.learners) == best
    assert choice.actors + choice.learners <= 8


def test_allocation_prefers_throughput_among_nearly_balanced_pairs():
    # (1, 1) is balanced exactly; (3, 3) is 10% off but three times faster: within the default tolerance.
    actors = {1: 100.0, 3: 330.0}
    learners = {1: 100.0, 3: 300.0}
    choice = choose_allocation(actors, learners, cores=6, update_interval=1.0)
    assert (choice.actors, choice.learners) == (3, 3)
    strict = choose_allocation(actors, learners, cores=6, update_interval=1.0, tolerance=0.0)
    assert (strict.actors, strict.learners) == (1, 1)
    table = format_profile(actors, learners, 1.0, choice, 6)
    assert "choice: 3 actor thread(s), 3 learner thread(s)" in table and "| 3 | 330 | 300.0 |" in table


def test_allocation_respects_the_core_budget_and_rejects_bad_input():
    actors = {1: 10.0, 2: 20.0, 3: 30.0}
    learners = {1: 5.0, 2: 10.0, 3: 15.0}
    choice = choose_allocation(actors, learners, cores=3, update_interval=1.0)
    assert choice.actors + choice.learners <= 3
    with pytest.raises(ValueError, match="update_interval"):
        choose_allocation(actors, learners, cores=3, update_interval=0.0)
    with pytest.raises(ValueError, match="positive"):
        choose_allocation({1: 0.0}, learners, cores=3, update_interval=1.0)
    with pytest.raises(ValueError, match="fits"):
        choose_allocation({4: 1.0}, learners, cores=4, update_interval=1.0)


@pytest.mark.parametrize("algo, env_id", [("dqn", "CartPole-v1"), ("sac", "Pendulum-v1"), ("td3", "Pendulum-v1")])
def test_an_actors_step_acts_with_its_key_folded_with_the_step(tmp_path, algo, env_id):
    """`act_at` (actors and Spreeze's samplers: the fold inside the program) picks exactly the actions of `act` with
    the key folded outside it, so the actors' exploration keys stay (actor, step) as documented."""
    import jax

    from envs.factory import make_spec
    from systems.offpolicy.agent import build_agent

    spec = make_spec(env_id)
    agent = build_agent(tiny_pal(tmp_path, algo=algo, env_id=env_id), spec)
    params = agent.policy_params(agent.initial_state.agent)
    key = jax.random.fold_in(agent.action_key, 1)
    obs = np.random.default_rng(0).normal(size=(3, *spec.obs_shape)).astype(np.float32)
    actions = [np.asarray(agent.act_at(params, obs, key, step, 0.5)) for step in (0, 7, 123_456)]
    for step, got in zip((0, 7, 123_456), actions, strict=True):
        expected = np.asarray(agent.act(params, obs, jax.random.fold_in(key, step), 0.5))
        assert got.dtype == expected.dtype and np.array_equal(got, expected), (step, got, expected)
    assert not all(np.array_equal(actions[0], a) for a in actions[1:])  # the step does change the draw


# ----------------------------------------------------------------------------------------------- runs


def test_pal_dqn_per_run_holds_the_ratio_and_writes_the_outputs(tmp_path):
    run_dir = str(tmp_path / "run")
    summary = system.run(tiny_pal(run_dir))
    assert summary["system"] == "pal" and summary["env_steps"] >= 1_000
    assert summary["optimizer_steps"] == (1_000 - 200) // 2  # warmup + u * U <= collected
    assert summary["collected_per_update"] == pytest.approx(2.0, rel=0.02)
    assert summary["priorities_updated"] > 0 and summary["replay_size"] > 0
    assert summary["evaluations"] >= 2 and summary["final_metric"] is not None
    for name in ("config.json", "progress.csv", "evaluations.csv", "summary.json"):
        assert os.path.exists(os.path.join(run_dir, name))
    with open(os.path.join(run_dir, "progress.csv")) as f:
        header = f.readline().strip().split(",")
    assert {"loss", "q_mean", "replay_size", "collected_per_update"} <= set(header)


@pytest.mark.parametrize("algo", ["ddqn", "ddpg", "td3", "sac"])
@pytest.mark.slow
def test_pal_every_algorithm_runs(tmp_path, algo):
    env = "CartPole-v1" if algo == "ddqn" else "Pendulum-v1"
    run_dir = str(tmp_path / algo)
    summary = system.run(tiny_pal(run_dir, env_id=env, algo=algo, replay="uniform" if algo == "td3" else "per",
                                  total_steps=600, learning_starts=100, update_interval=1.0, tau=0.005
                                  if algo != "ddqn" else 1.0))
    assert summary["optimizer_steps"] == 500 and summary["algo"] == algo
    assert np.isfinite(summary["last_eval_return"])
    assert all(np.isfinite(v) for v in summary["last_metrics"].values())


@pytest.mark.slow
def test_pal_dqn_on_atari_stores_each_frame_once(tmp_path):
    """Breakout frames go to the frame-indexed buffer (one 84x84 frame per row, stacks rebuilt by index), so the
    run's buffer costs about 7 KB per transition instead of 56 KB for stored obs and next_obs."""
    run_dir = str(tmp_path / "run")
    summary = system.run(tiny_pal(run_dir, env_id="Breakout-v5", total_steps=400, learning_starts=200,
                                  update_interval=8.0, batch_size=8, eval_episodes=0, buffer_size=4_000))
    assert summary["optimizer_steps"] == (400 - 200) // 8
    assert summary["replay_bytes"] == 4_000 * (84 * 84 + 4 + 4 + 4)
    assert summary["replay_size"] > 0 and summary["priorities_updated"] > 0


def test_pal_resume_restores_the_replay_buffer(tmp_path):
    run_dir = str(tmp_path / "run")
    first = system.run(tiny_pal(run_dir, total_steps=600, checkpoint_buffer=True))
    assert first["env_steps"] >= 600
    files = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    assert any(f.startswith("buffer_") for f in files)
    second = system.run(tiny_pal(run_dir, total_steps=1_000, checkpoint_buffer=True, resume=True))
    assert second["buffer_restored"] and second["resumed_from_env_steps"] == first["env_steps"]
    assert second["env_steps"] >= 1_000
    # No warm-up again: the restored buffer is learned from at once.
    assert second["optimizer_steps"] == first["optimizer_steps"] + (1_000 - first["env_steps"]) // 2


def test_pal_resume_falls_back_to_the_older_buffer_when_the_newest_is_corrupt(tmp_path, capsys):
    """A corrupt `buffer_*.npz` was a traceback with no fallback."""
    run_dir = str(tmp_path / "run")
    system.run(tiny_pal(run_dir, total_steps=1_000, checkpoint_buffer=True))
    directory = os.path.join(run_dir, "checkpoints")
    older, newest = sorted(f for f in os.listdir(directory) if f.startswith("buffer_"))
    with open(os.path.join(directory, newest), "r+b") as f:
        f.truncate(300)
    capsys.readouterr()
    second = system.run(tiny_pal(run_dir, total_steps=1_400, checkpoint_buffer=True, resume=True))
    err = capsys.readouterr().err
    assert f"warning: cannot load replay buffer from '{os.path.join(directory, newest)}': corrupt" in err
    assert second["buffer_restored"] and second["env_steps"] >= 1_400


def test_pal_resume_without_buffer_warms_up_again(tmp_path):
    run_dir = str(tmp_path / "run")
    first = system.run(tiny_pal(run_dir, total_steps=600))
    second = system.run(tiny_pal(run_dir, total_steps=1_000, resume=True))
    assert not second["buffer_restored"]
    assert second["optimizer_steps"] == first["optimizer_steps"] + (1_000 - first["env_steps"] - 200) // 2


def test_pal_allocate_auto_profiles_and_chooses(tmp_path, capsys):
    run_dir = str(tmp_path / "run")
    config = tiny_pal(run_dir, allocate="auto", cores=3, profile_seconds=0.3, total_steps=400, quiet=False)
    summary = system.run(config)
    allocation = summary["allocation"]
    assert set(allocation["actor_env_steps_per_second"]) == {"1", "2"}
    assert set(allocation["learner_optimizer_steps_per_second"]) == {"1", "2"}
    assert allocation["actors"] + allocation["learners"] <= 3
    assert summary["num_actors"] == allocation["actors"] and summary["num_learners"] == allocation["learners"]
    # config.json: the threads as asked (the config's), Eq. 5's choice as the plan beside them.
    recorded = read_config(run_dir)
    assert (recorded["num_actors"], recorded["num_learners"]) == (config.num_actors, config.num_learners)
    assert recorded["plan"] == dict(num_actors=allocation["actors"], num_learners=allocation["learners"],
                                    num_envs=allocation["actors"] * config.envs_per_actor)
    out = capsys.readouterr().out
    assert "Eq. 5" in out and "choice:" in out
    # The profiling threads stop when their window closes (they used to run on beside the training run).
    assert not [t.name for t in threading.enumerate() if t.name.startswith("profile-") and t.is_alive()]


def test_free_running_threads_stop_when_the_run_ends(tmp_path):
    """update_interval 0: learners never wait in the gate, so they must still see the stop."""
    run_dir = str(tmp_path / "run")
    start = time.monotonic()
    summary = system.run(tiny_pal(run_dir, update_interval=0.0, total_steps=600, eval_episodes=0))
    assert summary["optimizer_steps"] > 0
    assert time.monotonic() - start < 60
    alive = [t.name for t in threading.enumerate()
             if t.is_alive() and t.name.split("-")[0] in ("learner", "actor", "parameter")]
    assert not alive


def test_pal_config_rejects_bad_values(tmp_path):
    bad = [
        dict(num_learners=3, batch_size=32),
        dict(replay="rank"),
        dict(update_interval=-1.0),
        dict(allocate="auto", update_interval=0.0),
        dict(algo="ppo"),
        dict(tree_k=1),
    ]
    for overrides in bad:
        with pytest.raises(system.config_lib.ConfigError):
            system.validate(tiny_pal(str(tmp_path), **overrides))
    with pytest.raises(system.config_lib.ConfigError, match="continuous"):
        system.run(tiny_pal(str(tmp_path / "x"), algo="sac"))  # CartPole is discrete


def test_launcher_smoke(tmp_path):
    run_dir = str(tmp_path / "run")
    run_launcher(launch_pal.main, env="CartPole-v1", total_steps=400, learning_starts=100, batch_size=16,
                 hidden_sizes=["16"], eval_episodes=1, logdir=run_dir, quiet=True)
    summary = read_summary(run_dir)
    assert summary["algo"] == "dqn" and summary["optimizer_steps"] == 300
    assert_profile(summary, {"actors", "learners", "server", "main"})


@pytest.mark.parametrize(
    "args, message",
    [
        (["--env=CartPole-v1", "--algo=sac"], "continuous"),
        (["--env=Pendulum-v1", "--algo=dqn"], "discrete"),
        (["--env=CartPole-v1", "--num_envs=8"], "--num_envs does not apply"),
        (["--env=CartPole-v1", "--algo=ppo"], "--algo=ppo is trained by python -m launch.hts or launch.sync"),
        (["--env=CartPole-v1", "--num_learners=3", "--batch_size=128"], "must divide"),
        (["--env=CartPole-v1", "--hidden_sizes=a,b"], "--hidden_sizes"),
        (["--env=CartPole-v1", "--resume", "--logdir=/nonexistent/pal"], "--resume"),
    ],
)
@pytest.mark.slow
def test_launcher_bad_input_is_one_line_and_exit_2(args, message):
    result = subprocess.run([sys.executable, "-m", "launch.pal", *args, "--quiet"], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr


def test_on_policy_launcher_refuses_off_policy_algo():
    result = subprocess.run([sys.executable, "-m", "launch.hts", "--env=CartPole-v1", "--algo=dqn"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "launch.pal" in result.stderr


def test_dataclass_defaults_are_valid_and_the_validator_reads_them():
    """The defaults pass; the same config with one default broken is refused with its flag's name."""
    config = dataclasses.replace(system.PALConfig(env_id="CartPole-v1"), num_envs=4)
    assert system.validate(config) is None
    for change, flag in [(dict(batch_size=0), "--batch_size"), (dict(tree_k=1), "--tree_k"),
                         (dict(learning_starts=config.total_steps), "--learning_starts")]:
        with pytest.raises(ConfigError, match=flag):
            system.validate(dataclasses.replace(config, **change))


def test_prioritized_replay_takes_a_quarter_of_the_presets_step_size():
    """Schaul et al.'s step size for PER (a quarter of uniform replay's) is the DQN preset's; a flag is taken as
    given, and the continuous algorithms keep their rate."""
    rate = PAL_PRESETS["box2d"]["discrete"]["learning_rate"]
    assert launcher_config(launch_pal, "--env=LunarLander-v2").learning_rate == pytest.approx(rate / 4)
    assert launcher_config(launch_pal, "--env=LunarLander-v2", "--replay=uniform").learning_rate == rate
    assert launcher_config(launch_pal, "--env=LunarLander-v2", "--learning_rate=0.001").learning_rate == 1e-3
    sac = launcher_config(launch_pal, "--env=Pendulum-v1", "--algo=sac")
    assert sac.replay == "per" and sac.learning_rate == PAL_PRESETS["classic"]["continuous"]["learning_rate"]


def test_mujoco_presets_take_per_algorithm_values():
    """CleanRL's MuJoCo DDPG acts at random for 25k steps, its SAC for 5k with critics at 1e-3; TD3 for 5k (measured on
    Hopper, launch/pal.py); a flag wins and other families keep their preset."""
    assert launcher_config(launch_pal, "--env=Hopper-v4", "--algo=td3").learning_starts == 5_000
    assert launcher_config(launch_pal, "--env=Hopper-v4", "--algo=ddpg").learning_starts == 25_000
    sac = launcher_config(launch_pal, "--env=Hopper-v4", "--algo=sac")
    assert (sac.learning_starts, sac.learning_rate, sac.critic_learning_rate) == (5_000, 3e-4, 1e-3)
    flagged = launcher_config(launch_pal, "--env=Hopper-v4", "--algo=td3", "--learning_starts=10000")
    assert flagged.learning_starts == 10_000
    assert launcher_config(launch_pal, "--env=Pendulum-v1", "--algo=td3").learning_starts == 1_000


def test_td3_on_mujoco_starts_from_pytorchs_initialisation_unless_told():
    """From Flax's initialisation PAL's TD3 saturated its actor on Hopper; the preset takes PyTorch's for TD3 on
    MuJoCo / Brax only, and the flag wins."""
    assert launcher_config(launch_pal, "--env=Hopper-v4", "--algo=td3").network_init == "torch"
    assert launcher_config(launch_pal, "--env=Hopper-v4", "--algo=td3", "--network_init=flax").network_init == "flax"
    assert launcher_config(launch_pal, "--env=Hopper-v4", "--algo=sac").network_init == "flax"
    assert launcher_config(launch_pal, "--env=Pendulum-v1", "--algo=td3").network_init == "flax"
