"""Random environment step times to study synchronisation cost (seed 000, section 4.2, Claim 1).

HTS-RL (seed 000) Claim 1 / Eq. 7 gives the expected time to collect K states with n envs when the
per-step times X_i^(j) are i.i.d. and a sum of alpha of them is Gamma(alpha, rate beta), i.e. each
step time is exponential (Fig. 3 simulates exp(beta)); synchronising every step pays for the slowest
env each time, synchronising every alpha steps less so. To measure this on cheap simulators the
executor adds an artificial delay per env step, drawn i.i.d. from one of the distributions here:
none, a constant, an exponential, or a gamma with a chosen shape and mean (scale = mean / shape;
rate beta = shape / mean).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

_FORMS = "'none', 'const:MEAN', 'exp:MEAN' or 'gamma:SHAPE:MEAN' (seconds, positive)"
KINDS = ("none", "const", "exp", "gamma")


@dataclasses.dataclass(frozen=True)
class StepTimeDistribution:
    """Distribution of the artificial delay added to one environment step."""

    kind: str  # One of KINDS.
    mean: float  # Mean delay in seconds (0 for "none").
    shape: float  # Gamma shape parameter; 1.0 for every other kind (exp is gamma with shape 1).

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown step-time kind {self.kind!r}; expected one of {KINDS}")
        if self.kind == "none":
            if self.mean != 0.0:
                raise ValueError("step-time kind 'none' must have mean 0")
            return
        for name, value in (("mean", self.mean), ("shape", self.shape)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"step-time {name} must be positive and finite, got {value}")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """[size] float64 delays in seconds."""
        if self.kind == "none":
            return np.zeros(size, np.float64)
        if self.kind == "const":
            return np.full(size, self.mean, np.float64)
        if self.kind == "exp":
            return rng.exponential(self.mean, size)
        return rng.gamma(self.shape, self.mean / self.shape, size)


def parse_step_time(text: str) -> StepTimeDistribution:
    """Parses "", "none", "const:0.004", "exp:0.004" or "gamma:SHAPE:MEAN" (seconds)."""
    parts = [p.strip() for p in text.strip().split(":")]
    kind = parts[0].lower()
    if kind in ("", "none") and len(parts) == 1:
        return StepTimeDistribution("none", 0.0, 1.0)
    expected_fields = {"const": 2, "exp": 2, "gamma": 3}.get(kind)
    if expected_fields is None or len(parts) != expected_fields:
        raise ValueError(f"bad step time {text!r}; expected {_FORMS}")
    try:
        values = [float(p) for p in parts[1:]]
    except ValueError:
        raise ValueError(f"bad step time {text!r}; expected {_FORMS}") from None
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"bad step time {text!r}: values must be positive; expected {_FORMS}")
    if kind == "gamma":
        shape, mean = values
        return StepTimeDistribution("gamma", mean, shape)
    return StepTimeDistribution(kind, values[0], 1.0)
