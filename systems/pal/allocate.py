"""Design-space exploration of PAL (seed 003, section V-D, Eq. 5): choose the number of actor threads x_a and learner
threads x_l so that the data collection throughput matches update_interval times the data consumption throughput,

    f_a(x_a) = update_interval x f_l(x_l),    x_a + x_l <= M,

where f_a(x) is the measured env steps per second of x actor threads and f_l(x) the measured optimizer steps per
second of x learner threads (each optimizer step consumes one global batch, split over the learners), on this
machine with M cores.

The paper states the balance only. Read literally, it can prefer a balanced but slow pair (1 actor, 1 learner) to
a slightly less balanced pair that runs several times faster, so the choice here is made in two steps: among the
pairs whose imbalance |log(f_a / (update_interval f_l))| is within `tolerance` (default: a factor of 1.25) of the
best pair's, take the one with the highest system throughput min(f_a / update_interval, f_l) in optimizer steps
per second (ties: fewer threads). With `tolerance=0` this is exactly the closest pair of Eq. 5.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Allocation:
    actors: int
    learners: int
    actor_throughput: float  # f_a(x_a), env steps / s
    learner_throughput: float  # f_l(x_l), optimizer steps / s
    imbalance: float  # log(f_a / (update_interval f_l)); 0 is Eq. 5 exactly

    @property
    def system_throughput(self) -> float:
        """Optimizer steps / s the pair can sustain (for the update_interval it was chosen for)."""
        return self.learner_throughput if self.imbalance >= 0 else self.learner_throughput * math.exp(self.imbalance)


def choose_allocation(
    actor_curve: Mapping[int, float],
    learner_curve: Mapping[int, float],
    *,
    cores: int,
    update_interval: float,
    tolerance: float = math.log(1.25),
) -> Allocation:
    """Solves Eq. 5 over the measured points.

    Args:
      actor_curve: x -> f_a(x) > 0, env steps per second with x actor threads.
      learner_curve: x -> f_l(x) > 0, optimizer steps per second with x learner threads.
      cores: M; only pairs with x_a + x_l <= M are considered.
      update_interval: env steps per optimizer step (> 0).
      tolerance: see the module docstring (natural-log units).
    Raises:
      ValueError if no measured pair fits in `cores` or an input is invalid.
    """
    if not update_interval > 0:
        raise ValueError(f"update_interval must be > 0 for Eq. 5, got {update_interval}")
    if cores < 2:
        raise ValueError(f"need at least 2 cores for one actor and one learner, got {cores}")
    for name, curve in (("actor", actor_curve), ("learner", learner_curve)):
        for x, value in curve.items():
            if x < 1 or not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} throughput must be positive at x >= 1, got f({x}) = {value}")
    candidates = [
        Allocation(xa, xl, fa, fl, math.log(fa / (update_interval * fl)))
        for xa, fa in sorted(actor_curve.items())
        for xl, fl in sorted(learner_curve.items())
        if xa + xl <= cores
    ]
    if not candidates:
        raise ValueError(f"no measured (actors, learners) pair fits in {cores} cores")
    best = min(abs(c.imbalance) for c in candidates)
    near = [c for c in candidates if abs(c.imbalance) <= best + tolerance + 1e-12]
    return max(near, key=lambda c: (c.system_throughput, -(c.actors + c.learners), -c.actors))


def format_profile(actor_curve: Mapping[int, float], learner_curve: Mapping[int, float], update_interval: float,
                   choice: Allocation, cores: int) -> str:
    """The profile table and the choice, as printed by `--allocate=auto`."""
    xs = sorted(set(actor_curve) | set(learner_curve))
    lines = [
        f"PAL design-space exploration (seed 003 Eq. 5), M = {cores} cores, update_interval = {update_interval:g}",
        "| threads x | f_a(x) env steps/s | f_l(x) optimizer steps/s | update_interval x f_l(x) |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for x in xs:
        fa = actor_curve.get(x)
        fl = learner_curve.get(x)
        lines.append(
            f"| {x} | {'-' if fa is None else f'{fa:,.0f}'} | {'-' if fl is None else f'{fl:,.1f}'} | "
            f"{'-' if fl is None else f'{update_interval * fl:,.1f}'} |"
        )
    lines.append(
        f"choice: {choice.actors} actor thread(s), {choice.learners} learner thread(s): f_a = "
        f"{choice.actor_throughput:,.0f} env steps/s vs update_interval x f_l = "
        f"{update_interval * choice.learner_throughput:,.1f} (ratio {math.exp(choice.imbalance):.2f}), "
        f"about {choice.system_throughput:,.1f} optimizer steps/s"
    )
    return "\n".join(lines)
