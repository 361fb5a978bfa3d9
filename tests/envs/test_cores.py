"""Env workers, the layout rule and the process limits count the cores this process may use (its affinity mask: a
container's, a Slurm allocation's or taskset's limit), not the host's; EnvPool's threads are pinned only when asked."""

import dataclasses
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envs.executor
import envs.factory
from envs.executor import Executor
from envs.factory import make_pool, make_spec
from systems.common import limits
from tests.fixtures import REPO_ROOT


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs Linux affinity and two cores")
def test_a_process_pinned_to_one_core_counts_one_where_the_host_has_more():
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from envs.cores import usable_cores; from systems.common import layout_rule; "
            "print(usable_cores(), layout_rule.this_machine().cores, os.cpu_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    usable, machine, host = map(int, out.stdout.split())
    assert usable == machine == 1 and host >= 2


@settings(max_examples=8, deadline=None)
@given(num_envs=st.integers(1, 6), cores=st.integers(1, 6))
def test_a_pools_default_workers_are_its_envs_up_to_the_usable_cores(num_envs, cores):
    spec = make_spec("CartPole-v1")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(envs.factory, "usable_cores", lambda: cores)
        patch.setattr(envs.executor, "usable_cores", lambda: cores)
        pool = make_pool(spec, num_envs=num_envs, batch_size=num_envs, seed=0)
        executor = Executor(spec, num_envs=num_envs, batch_size=num_envs, seed=0)
    assert pool.config["num_threads"] == executor._pool.config["num_threads"] == min(num_envs, cores)
    pool.close()
    executor.close()


def test_the_process_limit_scales_with_the_usable_cores(monkeypatch):
    monkeypatch.setattr(limits, "available_memory_bytes", lambda: 2**50)
    monkeypatch.setattr(limits, "usable_cores", lambda: 1)
    assert limits.max_processes() == limits.PROCESSES_PER_CORE
    monkeypatch.setattr(limits, "usable_cores", lambda: 3)
    assert limits.max_processes() == 3 * limits.PROCESSES_PER_CORE


def _cores_of_new_threads(before: set[str]) -> list[str]:
    """Each thread this process started since `before` (its /proc/self/task ids): the cores it may run on."""
    cores = []
    for tid in sorted(set(os.listdir("/proc/self/task")) - before):
        with open(f"/proc/self/task/{tid}/status") as f:
            cores += [line.split()[1] for line in f if line.startswith("Cpus_allowed_list:")]
    return cores


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2
                    or sorted(os.sched_getaffinity(0)) != list(range(os.cpu_count() or 1)),
                    reason="needs Linux /proc and two cores, all of them this process's")
def test_an_executor_pins_envpools_threads_from_the_offset_and_leaves_them_alone_by_default():
    spec = make_spec("CartPole-v1")
    allowed = sorted(os.sched_getaffinity(0))
    before = set(os.listdir("/proc/self/task"))
    pinned = Executor(spec, num_envs=4, batch_size=2, seed=0, num_threads=2, thread_affinity_offset=0)
    allowed_text = f"{allowed[0]}-{allowed[-1]}" if len(allowed) > 1 else str(allowed[0])
    # EnvPool's two workers, worker t on core 0 + t; any other new thread (EnvPool's start-up pool) keeps the mask.
    assert sorted(c for c in _cores_of_new_threads(before) if c != allowed_text) == ["0", "1"]
    pinned.close()
    before = set(os.listdir("/proc/self/task"))
    free = Executor(spec, num_envs=4, batch_size=2, seed=0, num_threads=2)
    assert set(_cores_of_new_threads(before)) == {allowed_text}
    free.close()


@pytest.mark.parametrize("family,offset,message", [
    ("classic", -2, r"must be -1 \(no pinning\) or a core"),
    ("gymnasium", 0, "a gymnasium pool has none"),
    ("gymnax", 0, "a gymnax pool has none"),
])
def test_a_pinning_a_pool_cannot_take_is_refused(family, offset, message):
    spec = dataclasses.replace(make_spec("CartPole-v1"), family=family)  # refused before any pool is built
    with pytest.raises(ValueError, match=message):
        make_pool(spec, num_envs=2, batch_size=2, seed=0, thread_affinity_offset=offset)
