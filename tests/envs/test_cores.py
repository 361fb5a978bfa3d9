"""Env workers, the layout rule and the process limits count the cores this process may use (its affinity mask: a
container's, a Slurm allocation's or taskset's limit), not the host's."""

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
