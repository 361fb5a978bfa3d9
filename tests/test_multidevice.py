"""`multidevice.run_python`'s and `run_processes`' children, forked from the worker's zygote, behave as `python -c`
children do."""

import subprocess
import time

import pytest

from tests.multidevice import run_processes, run_python

_DEVICES = "import jax; print(len(jax.devices()))"


def test_each_child_sees_its_own_device_count():
    assert [run_python(_DEVICES, n).strip() for n in (3, 1, 2)] == ["3", "1", "2"]


def test_a_failing_child_reports_its_traceback_and_exit_status():
    with pytest.raises(AssertionError) as failure:
        run_python("print('before')\nraise ValueError('boom')", 1)
    message = str(failure.value)
    assert "exit 1" in message and "before" in message
    assert 'File "<string>", line 2, in <module>' in message and "ValueError: boom" in message
    assert "zygote" not in message  # no frame of the zygote's own


def test_exit_codes_threads_and_atexit_are_the_interpreters():
    with pytest.raises(AssertionError, match="exit 7"):
        run_python("import sys; sys.exit(7)", 1)
    out = run_python("""
        import atexit, threading, time
        atexit.register(lambda: print("atexit", flush=True))
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread", flush=True))).start()
        print(__name__, "__file__" in globals())
        """, 1)
    assert out.split() == ["__main__", "False", "thread", "atexit"]


def test_a_child_past_its_timeout_is_killed():
    with pytest.raises(subprocess.TimeoutExpired):
        run_python("import time; time.sleep(60)", 1, timeout=1)
    assert run_python("print('next')", 1).strip() == "next"  # the zygote serves on


def test_a_childs_spawned_processes_start_as_under_python_c():
    out = run_python("""
        import multiprocessing
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            print(pool.apply(sum, ([1, 2, 3],)))
        """, 1)
    assert out.strip() == "6"


def test_one_zygote_serves_every_test_of_a_worker(monkeypatch):
    """pytest names the running test in the environment: that must not start a new zygote for each test."""
    first = run_python("import os; print(os.getppid())", 1)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/other.py::test_other (call)")
    assert run_python("import os; print(os.getppid())", 2) == first
    assert run_python("import os; print(os.environ['PYTEST_CURRENT_TEST'])", 1).strip() == (
        "tests/other.py::test_other (call)")  # the child still gets the test's environment


def test_a_jobs_processes_run_at_once_and_a_failing_one_ends_the_others(tmp_path):
    """Process 0 waits for a file process 1 writes (they run at once); a process that fails ends the one still
    waiting for it, as a job's other process would otherwise wait at its next collective until JAX's deadline."""
    flag = str(tmp_path / "flag")
    wait = f"import os, time\nwhile not os.path.exists({flag!r}): time.sleep(0.01)\nprint('saw it')"
    outputs = run_processes([wait, f"open({flag!r}, 'w').close(); print('wrote it')"], 1, str(tmp_path))
    assert [out.strip() for out in outputs] == ["saw it", "wrote it"]
    start = time.monotonic()
    with pytest.raises(AssertionError) as failure:
        run_processes(["import time; time.sleep(60)", "raise SystemExit(5)"], 1, str(tmp_path))
    assert time.monotonic() - start < 30
    assert "process 1 failed (exit 5)" in str(failure.value)
