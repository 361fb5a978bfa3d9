"""Gossip-based Actor-Learner Architectures (GALA, seed 004, Algorithm 1): `num_learners` A2C learners, each with
its own envs and parameters, that mix their parameters with their in-peers' after every local step,
x_i <- (x_i + sum_j m_j) / (1 + |in-peers|), on a directed ring (`--num_peers`) or a time-varying exponential graph.

Two execution modes, same learner update (`agents.a2c_update` and `agents.gossip.mix`):

* `--gossip=async` (Algorithm 1 as written): one thread per learner, each on its own device when there are enough.
  After its local A2C step a learner broadcasts its parameters without blocking (a newer message overwrites an
  unread one), mixes when it holds a message from every in-peer, and otherwise carries on
  (`systems.gala.buffers.GossipNetwork`). `--max_staleness` (tau) makes a learner wait when its newest message
  from an in-peer is more than tau local iterations old. A slow learner never holds the others back (without tau).
  Results depend on thread timing by design: a seed does not fix them. Static ring topology only.
* `--gossip=pmap`: learners on the named pmap axis `LEARNER_AXIS`, in lock-step. Each iteration a learner takes its
  local step, mixes the result with the messages its in-peers sent one iteration earlier, and sends its new
  parameters with `ppermute`; the messages are consumed the next iteration, so communication overlaps the next
  step. The messages in transit start as the (common) initial parameters. A seed and a device count fix the run
  bit for bit. Runs across hosts with `jax.distributed` (`--num_processes`).

Logged every update: the consensus distance ||X - mean(X)|| over the learners, and the Proposition 1 bound
computed from the learners' update norms (`agents.gossip.ConsensusBound`, the exact lock-step model with
one-iteration-old messages; in async mode the same model is fed per round of all learners, which makes it an
estimate there, not a guarantee; after `--resume` the learners no longer start equal, the proof's initial-spread term
is not zero and the logged bound, which restarts from the resumed iteration, may be exceeded). `--log_grad_cosine`
adds the learners' pairwise gradient cosine similarity (Fig. 2b) to `grad_cosine.csv`.

Departures from seed 004: RMSProp epsilon is 1e-5 (the paper's code; its Table 2 says 0.01); the exponential graph
needs lock-step iterations, so it runs in the pmap mode only.

The learning rate is the base rate times sqrt(number of learners) by default (seed 004, Table 2). Evaluation plays
learner 0's policy; the fingerprint in summary.json covers every learner's parameters.
"""

from __future__ import annotations

from systems.common import run as skeleton
from systems.gala.config import MODES, SYSTEM, TOPOLOGIES, GALAConfig, Plan, plan, validate
from systems.gala.learners import GossipState, make_agent
from systems.gala.lockstep import open_pmap
from systems.gala.threaded import open_async

__all__ = ["MODES", "SYSTEM", "TOPOLOGIES", "GALAConfig", "GossipState", "Plan", "make_agent", "plan", "run",
           "validate"]


def run(config: GALAConfig) -> dict:
    """Trains GALA-A2C; returns the summary (also written to `<run dir>/summary.json`)."""
    return skeleton.run(SYSTEM, config, _open, validate=validate)


def _open(config: GALAConfig) -> skeleton.Opening:
    """The plan, then the mode's learners (`--gossip`)."""
    run_plan = plan(config)
    return (open_pmap if config.gossip == "pmap" else open_async)(config, run_plan)
