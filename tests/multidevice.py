"""Runs a piece of Python in a fresh interpreter with N forced XLA CPU devices.

The device count of the host platform is fixed when JAX starts (`--xla_force_host_platform_device_count`), so every
test that needs several devices runs its code here, in its own process, from the repository root."""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The suite's quick-compile XLA flags (conftest adds them): LLVM at -O0, and on jaxlib >= 0.10 (where they were
# measured) XLA CPU's elemental emitter for fused loops instead of its MLIR fusion emitters, one LLVM module per
# program, and no expensive LLVM passes. A tiny HTS CartPole run: 9.4 CPU-s at -O0 alone, 6.8 with all (XLA's
# backend compile 2.9 -> 1.2 s); results within a process are as deterministic as before.
QUICK_COMPILE_FLAGS = {"xla_backend_optimization_level": "0"}
try:
    from importlib.metadata import version as _version

    if tuple(int(part) for part in _version("jaxlib").split(".")[:2]) >= (0, 10):
        QUICK_COMPILE_FLAGS.update(xla_cpu_use_fusion_emitters="false", xla_cpu_parallel_codegen_split_count="1",
                                   xla_llvm_disable_expensive_passes="true")
except (ImportError, ValueError):  # no jaxlib metadata or an unusual version string: -O0 alone
    pass


def device_env(num_devices: int, optimized: bool = False, fusion_emitters: bool = False) -> dict:
    """Environment for a child process that sees `num_devices` CPU devices and imports the repository. `optimized`
    drops conftest's quick-compile flags (for a test whose run time, not its compiles, dominates); `fusion_emitters`
    only the elemental emitter (for a test that compares two differently fused programs to the last bits: the two
    emitters round a fused loop's math differently, and XLA's default is what runs outside the tests)."""
    env = dict(os.environ)
    dropped = ["xla_force_host_platform_device_count"]
    if optimized:
        dropped.extend(QUICK_COMPILE_FLAGS)
    if fusion_emitters:
        dropped.append("xla_cpu_use_fusion_emitters")
    kept = [flag for flag in env.get("XLA_FLAGS", "").split() if not any(name in flag for name in dropped)]
    env["XLA_FLAGS"] = " ".join([*kept, f"--xla_force_host_platform_device_count={num_devices}"])  # conftest's kept
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_python(code: str, num_devices: int, timeout: float = 600.0, optimized: bool = False,
               fusion_emitters: bool = False) -> str:
    """Runs `code` (dedented) with `num_devices` CPU devices; returns stdout, fails with the child's output. The child
    is forked from this worker's pre-imported `tests.zygote` (or, with `HTSRL_TEST_FRESH_CHILDREN=1` or when the
    zygote cannot start, a fresh interpreter): the same code, environment and exit status either way."""
    code, env = textwrap.dedent(code), device_env(num_devices, optimized, fusion_emitters)
    zygote = _zygote(env)
    if zygote is None:
        result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=timeout)
        returncode, stdout, stderr = result.returncode, result.stdout, result.stderr
    else:
        returncode, stdout, stderr = zygote.run(code, env, timeout)
    if returncode != 0:
        raise AssertionError(
            f"child process failed (exit {returncode})\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        )
    return stdout


class _Zygote:
    """This worker's `tests.zygote` process, for one environment (all but `XLA_FLAGS`: JAX reads the rest when it
    is imported, XLA the flags when its backend starts)."""

    def __init__(self, env: dict):
        self.key = _zygote_key(env)
        self.proc = subprocess.Popen([sys.executable, "-c", "import tests.zygote as z; z.serve()"], cwd=ROOT,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.pending = b""  # bytes read after the last full reply line
        if self._reply(timeout=120) != {"ready": True}:
            raise RuntimeError("the zygote did not start")

    def _reply(self, timeout: float):
        """The next reply line, or None after `timeout` s or at the zygote's end (a raw pipe: no buffer hides a line
        from `select`)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            if not select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def run(self, code: str, env: dict, timeout: float) -> tuple[int, str, str]:
        with tempfile.TemporaryDirectory(prefix="zygote-child-") as tmp:
            out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
            [status] = self.run_together([code], env, [(out, err)], timeout)
            with open(out) as f_out, open(err) as f_err:
                return status, f_out.read(), f_err.read()

    def run_together(self, codes: list[str], env: dict, outputs: list[tuple[str, str]], timeout: float) -> list[int]:
        """Runs one child per code at once, child i writing to the files `outputs[i]` (stdout, stderr); returns
        their exit statuses. After `timeout` s every child is killed and `subprocess.TimeoutExpired` raised."""
        children = [dict(code=code, env=env, stdout=out, stderr=err) for code, (out, err) in zip(codes, outputs,
                                                                                                 strict=True)]
        request = (json.dumps(dict(children=children)) + "\n").encode()
        while request:
            request = request[self.proc.stdin.write(request):]
        pids = self._reply(timeout=60)["pids"]
        reply = self._reply(timeout)
        if reply is None:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:  # ended (and reaped by the zygote) just now
                    pass
            self._reply(timeout=60)
            raise subprocess.TimeoutExpired(["python", "-c", codes[0]], timeout)
        return reply["statuses"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


_ZYGOTE: _Zygote | None = None
_ZYGOTE_FAILED = False


def _zygote_key(env: dict) -> tuple:
    """What a zygote's imports may have read: the environment but `XLA_FLAGS` and pytest's name of the running test
    (which changes with every test; the child gets it with the rest)."""
    return tuple(sorted((name, value) for name, value in env.items()
                        if name not in ("XLA_FLAGS", "PYTEST_CURRENT_TEST")))


def _zygote(env: dict) -> _Zygote | None:
    """The zygote for `env`: started on first use, restarted when the environment changed; None if it fails or with
    `HTSRL_TEST_FRESH_CHILDREN=1` (children are then fresh interpreters)."""
    global _ZYGOTE, _ZYGOTE_FAILED
    if os.environ.get("HTSRL_TEST_FRESH_CHILDREN") == "1":
        return None
    if _ZYGOTE is not None and (_ZYGOTE.key != _zygote_key(env) or _ZYGOTE.proc.poll() is not None):
        _ZYGOTE.close()
        _ZYGOTE = None
    if _ZYGOTE is None and not _ZYGOTE_FAILED:
        try:
            _ZYGOTE = _Zygote(env)
        except (OSError, RuntimeError, ValueError):
            _ZYGOTE_FAILED = True
    return _ZYGOTE


@atexit.register
def _close_zygote() -> None:
    if _ZYGOTE is not None:
        _ZYGOTE.close()


def call_in_child(function, *args, optimized: bool = False, fusion_emitters: bool = False) -> None:
    """Calls `function(*args)` (a module-level function of a test module; arguments that `repr` writes back) in a
    child process with one CPU device and the XLA flags `device_env` gives for `optimized` / `fusion_emitters`."""
    module = os.path.splitext(os.path.relpath(sys.modules[function.__module__].__file__, ROOT))[0].replace(os.sep, ".")
    run_python(f"from {module} import {function.__name__}\n{function.__name__}(*{args!r})", num_devices=1,
               optimized=optimized, fusion_emitters=fusion_emitters)


def run_with_fusion_emitters(function, *args) -> None:
    """`call_in_child` under XLA's default fusion emitters (a test comparing two programs to the last bits)."""
    call_in_child(function, *args, fusion_emitters=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(codes: list[str], num_devices: int, workdir: str, timeout: float = 600.0) -> list[str]:
    """Runs one Python process per code string at once (a `jax.distributed` job), each with `num_devices` CPU
    devices; returns their stdouts. Output goes to files, not pipes: a process blocked on a full pipe would never
    reach JAX's shutdown barrier and the job would abort."""
    codes, env = [textwrap.dedent(code) for code in codes], device_env(num_devices)
    paths = [(os.path.join(workdir, f"process-{i}.out"), os.path.join(workdir, f"process-{i}.err"))
             for i in range(len(codes))]
    zygote = _zygote(env)
    if zygote is not None:
        statuses = zygote.run_together(codes, env, paths, timeout)
    else:
        statuses = _run_fresh_together(codes, env, paths, timeout)
    outputs, failures = [], []
    for i, (status, (out, err)) in enumerate(zip(statuses, paths, strict=True)):
        with open(out) as f_out, open(err) as f_err:
            stdout, stderr = f_out.read(), f_err.read()
        if status != 0:
            failures.append(f"process {i} failed (exit {status})\n--- stderr tail\n{stderr[-3000:]}")
        outputs.append(stdout)
    if failures:
        raise AssertionError("\n".join(failures))
    return outputs


def _run_fresh_together(codes: list[str], env: dict, paths: list[tuple[str, str]], timeout: float) -> list[int]:
    """`run_processes` without the zygote: one fresh interpreter per code, at once; their exit statuses."""
    procs = []
    try:
        for code, (out, err) in zip(codes, paths, strict=True):
            with open(out, "w") as f_out, open(err, "w") as f_err:
                procs.append(subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=f_out,
                                              stderr=f_err))
        deadline = time.monotonic() + timeout
        while True:  # a failed process ends the others (below), as the zygote does
            statuses = [proc.poll() for proc in procs]
            if None not in statuses or any(statuses):
                break
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["python", "-c", codes[0]], timeout)
            time.sleep(0.05)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [proc.returncode for proc in procs]


def run_two_process_job(script, workdir, name: str = "multi", num_devices: int = 2) -> list[dict]:
    """A 2-process `jax.distributed` job on 127.0.0.1, `num_devices` CPU devices each: process p runs
    `script(extra)`, where `extra` holds its multi-host config fields, with `sys.argv[1:]` = [<workdir>/<name>,
    <workdir>/<name><p>.npy]; returns the last JSON line each process printed."""
    port = free_port()
    codes = []
    for pid in range(2):
        extra = f'coordinator_address="127.0.0.1:{port}", num_processes=2, process_id={pid}'
        argv = [os.path.join(str(workdir), name), os.path.join(str(workdir), f"{name}{pid}.npy")]
        codes.append(f"import sys; sys.argv = ['x', *{argv!r}]\n" + script(extra))
    return [json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
            for stdout in run_processes(codes, num_devices=num_devices, workdir=str(workdir))]


def start_launcher_job(module: str, args: list[str], run_dir, port: int, *extra: str, num_devices: int = 2) -> list:
    """Starts a 2-process job of `python -m <module> <args> --logdir=<run_dir> <extra>` on 127.0.0.1:`port`,
    `num_devices` CPU devices each; returns the `Popen`s (output in `<run_dir>.p<i>[-resume].log`)."""
    procs = []
    for pid in range(2):
        log = open(f"{run_dir}.p{pid}{'-resume' if extra else ''}.log", "w")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", module, *args, "--num_processes=2", f"--process_id={pid}",
             f"--coordinator_address=127.0.0.1:{port}", f"--logdir={run_dir}", *extra],
            cwd=ROOT, env=device_env(num_devices), stdout=log, stderr=subprocess.STDOUT))
    return procs


def stop_job_when(procs: list, ready, stop_timeout: float, logs=lambda: None) -> list[int]:
    """Waits (up to 240 s) until `ready()`, failing if a process of the job ends first; then sends every process
    SIGTERM and returns their exit statuses (each waited up to `stop_timeout` s). Kills any still running on the way
    out. `logs()` goes into the failure message."""
    try:
        deadline = time.time() + 240
        while not ready():
            assert time.time() < deadline and all(p.poll() is None for p in procs), ("the job did not start", logs())
            time.sleep(0.5)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        return [proc.wait(timeout=stop_timeout) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
