"""Jitted functions made once per process for equal keys, so that a second run of the same agent in a process (a
sweep's, a test's, a later evaluator's) reuses the function and with it its traced, lowered and compiled programs
(JAX's persistent cache saves only the compile). Flax modules compare and hash by their fields, so a network is a
key."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

_SIZE = 64  # entries kept (the oldest is dropped first)
_MADE: dict = {}


def made_once(key: Hashable, make: Callable[[], Any]) -> Any:
    """`make()`, made on the first call with `key` and returned again for an equal key; a key that cannot be hashed
    (a network with an unhashable field) gets its own."""
    try:
        hash(key)
    except TypeError:
        return make()
    if key not in _MADE:
        if len(_MADE) >= _SIZE:
            _MADE.pop(next(iter(_MADE)))
        _MADE[key] = make()
    return _MADE[key]
