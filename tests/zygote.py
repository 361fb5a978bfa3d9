"""A pre-imported parent that forks the children of `multidevice.run_python`, so each child skips Python's imports.

A test that needs several CPU devices runs its code in a child process (the device count is fixed when JAX's
backend starts). A fresh interpreter spends about a second importing JAX, Flax, Optax and the repository before the
code runs; this process imports them once, without starting JAX's backend, and forks one child per request. The
child takes the request's environment (`XLA_FLAGS` with its device count: XLA reads it when the backend starts), its
output files and the `-c` module as `__main__`, then runs the code as `python -c` would: the same exit status,
traceback, wait for non-daemon threads and `atexit` handlers. It then leaves with `os._exit`, skipping the teardown of
the interpreter's modules (0.8 s in a forked child, whose every decref copies a page the zygote shares).

Protocol, one JSON line each way (stdin / stdout of this process): request `{"children": [{"code", "env",
"stdout", "stderr"}, ...]}` (several children run at once: the processes of a `jax.distributed` job); replies
`{"pids"}` when they have started, then `{"statuses"}` (their exit codes, negative for a signal) when all have ended.
Start it as `python -c "import tests.zygote as z; z.serve()"`."""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import threading
import traceback

# What the children import most; each is imported if it can be (a missing extra is not an error).
PRELOAD = ("numpy", "jax", "jax.numpy", "flax.linen", "optax", "chex", "rlax", "envpool", "gymnasium",
           "agents", "envs.factory", "systems.common.learner", "launch.common", "launch.hts")


def _preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # an optional import: the child imports it itself if it needs it
            pass
    from jax._src import xla_bridge

    if xla_bridge._backends:  # a module started JAX's backend: the children could not choose their device count
        raise SystemExit("zygote: a preloaded module started JAX's backend")


def _run_child(request: dict, channels: list[int]) -> None:
    """In the forked child: the request's environment and files, then its code in `__main__`; never returns."""
    for fd in channels:
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    sys.argv = ["-c"]
    main = sys.modules["__main__"]  # the zygote's own `-c` module: no file, as a `python -c` child has
    for name in [name for name in vars(main) if not name.startswith("__")]:
        delattr(main, name)
    status = 0
    try:
        exec(compile(request["code"], "<string>", "exec"), vars(main))
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            status = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            status = 1
    except BaseException as error:  # reported as the interpreter would, without this frame
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        status = 1
    threading._shutdown()  # what the interpreter does at exit: wait for non-daemon threads, then atexit
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _wait_for(pids: list[int]) -> list[int]:
    """The children's exit codes once all have ended; a child that fails ends the others (SIGKILL), as a job whose
    other processes would wait for it at their next collective until JAX's deadline."""
    statuses: dict[int, int] = {}
    while len(statuses) < len(pids):
        pid, status = os.waitpid(-1, 0)
        if pid not in pids:
            continue
        statuses[pid] = os.waitstatus_to_exitcode(status)
        if statuses[pid] != 0:
            for other in pids:
                if other not in statuses:
                    os.kill(other, signal.SIGKILL)
    return [statuses[pid] for pid in pids]


def serve() -> None:
    """Preloads, then forks one child per request until stdin closes."""
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # stray prints of the imports must not reach the protocol
    os.close(devnull)
    _preload()
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in requests:
        pids = []
        for child in json.loads(line)["children"]:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _run_child(child, [requests.fileno(), replies.fileno()])
            pids.append(pid)
        replies.write(json.dumps({"pids": pids}) + "\n")
        replies.flush()
        statuses = _wait_for(pids)
        replies.write(json.dumps({"statuses": statuses}) + "\n")
        replies.flush()
    os._exit(0)
