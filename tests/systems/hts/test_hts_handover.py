"""HTS-RL's hand-over between actors and learner keeps Eq. 6 (round r >= 2 collected with theta_{r-1}) and reports
the policy lag of the round it learned from, whatever the threads' timing. Each test forces the timing that broke
it: a learner that finishes before the actors read the parameters, and actors that refill a storage before the
learner reports on it (seen once in the suite: a two-process HTS run stopped with "policy lag -1")."""

import queue
import threading
import types

from systems.hts.system import _Handover, _learner_loop, _Published, hts_profile


class _InstantLearner(queue.Queue):
    """A job queue whose learner learns from each storage (publishes the next version) the moment it is handed over:
    the fastest timing a learner thread can have."""

    def __init__(self, handover: _Handover):
        super().__init__()
        self._handover = handover

    def put(self, item, block=True, timeout=None):
        super().put(item, block, timeout)
        if item is not None:
            version, _ = self._handover.store.latest()
            self._handover.store.publish(_Published(f"theta_{version + 1}", (f"theta_{version + 1}",)), version + 1)


def test_the_next_round_gets_the_version_before_the_hand_over_however_fast_the_learner():
    stopping = threading.Event()
    handover = _Handover(_Published("theta_0", ("theta_0",)), start_round=0, stopping=stopping)
    handover._jobs = _InstantLearner(handover)
    behaviour = [handover.on_round_complete(types.SimpleNamespace(), last=False) for _ in range(3)]
    # Rounds 1, 2, 3 are collected with theta_0, theta_1, theta_2 (Eq. 6), though the learner had already made
    # theta_1, theta_2, theta_3 when the actors asked.
    assert behaviour == [(0, ("theta_0",)), (1, ("theta_1",)), (2, ("theta_2",))]


class _Learner:
    """A learner whose reporting (host_view, after publishing) is slow enough for the actors to refill the storage
    it learned from: they stamp the storage with a newer behaviour version meanwhile."""

    def __init__(self):
        self.state = types.SimpleNamespace(params="theta_0")
        self.storage = None

    def learn(self, state, behaviour_params, storage):
        self.storage = storage
        return types.SimpleNamespace(params=f"after {storage.name}"), {}

    def host_view(self, tree):
        if self.storage is not None:
            self.storage.behaviour_version += 1  # the actors' next round on this storage object
        return tree

    def published(self, params):
        return _Published(params, (params,))


def test_the_report_carries_the_behaviour_version_of_the_round_learned_from():
    stopping = threading.Event()
    handover = _Handover(_Published("theta_0", ("theta_0",)), start_round=0, stopping=stopping)
    storages = [types.SimpleNamespace(name=f"round {r}", behaviour_version=0) for r in range(2)]
    handover._jobs.put(storages[0])
    reports = queue.Queue()
    thread = threading.Thread(target=_learner_loop, args=(handover, _Learner(), lambda: None, reports, 0,
                                                           hts_profile()), daemon=True)
    thread.start()
    timer = threading.Timer(30, stopping.set)  # a broken loop fails the test instead of hanging it
    timer.daemon = True
    timer.start()
    handover.store.wait_for(1, stopping)
    handover._jobs.put(storages[1])
    handover._jobs.put(None)
    thread.join(timeout=10)
    timer.cancel()
    assert not thread.is_alive()
    lags = [(r.learner_version, r.behaviour_version) for r in (reports.get_nowait(), reports.get_nowait())]
    assert lags == [(0, 0), (1, 0)]


def test_with_a_pool_per_actor_each_actor_thread_alone_receives_from_its_own_pool(tmp_path, monkeypatch, capsys):
    """`--env_pools=per_actor`: actor thread k takes only from pool k, no receiver thread starts, each pool's EnvPool
    is made with the envs, seed, threads and pinning the plan records, and the start line says so."""
    import json

    import envs.executor
    from envs.actor_pools import OwnPoolExecutor
    from envs.executor import Executor
    from systems.hts import system as hts
    from tests.fixtures import tiny_hts

    takers, receivers, take, made, make_pool = {}, [], OwnPoolExecutor.take, [], envs.executor.make_pool

    def recording_make_pool(spec, **kwargs):
        made.append((kwargs["num_envs"], kwargs["seed"], kwargs["num_threads"], kwargs["thread_affinity_offset"]))
        return make_pool(spec, **kwargs)

    monkeypatch.setattr(envs.executor, "make_pool", recording_make_pool)

    def recording_take(self, *args, **kwargs):
        takers.setdefault(id(self), set()).add(threading.current_thread().name)
        return take(self, *args, **kwargs)

    monkeypatch.setattr(OwnPoolExecutor, "take", recording_take)
    monkeypatch.setattr(Executor, "_receive_loop", lambda self: receivers.append(self))
    summary = hts.run(tiny_hts(tmp_path, num_envs=5, num_actors=3, env_pools="per_actor", total_steps=3 * 80,
                               env_threads=2, env_thread_affinity=0, seed=7, quiet=False, eval_episodes=0))
    assert summary["updates"] == 3
    assert sorted(map(sorted, takers.values())) == [["actor-0"], ["actor-1"], ["actor-2"]]
    assert receivers == []
    with open(tmp_path / "config.json") as f:
        plan = json.load(f)["plan"]
    assert plan["env_pools"]["layout"] == "per_actor" and plan["env_pools"]["envs"] == [2, 2, 1]
    assert plan["batches"]["env"] == plan["env_pools"]["batches"] == [2, 2, 1]
    # Two threads dealt over three pools, at least one each; pinned pools one after another.
    assert plan["env_pools"]["threads"] == [1, 1, 1] and plan["env_pools"]["pinned_from"] == [0, 1, 2]
    assert made == [(2, 7, 1, 0), (2, 9, 1, 1), (1, 11, 1, 2)]  # env i seeded 7 + i whichever pool steps it
    assert "EnvPool: a pool per actor thread, each received by the thread that owns it: 2 + 2 + 1 envs, batches " \
           "2, 2, 1, worker threads 1, 1, 1, pinned from cores 0, 1, 2" in capsys.readouterr().out
