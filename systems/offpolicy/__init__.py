"""The floor PAL (seed 003) and Spreeze (seed 002) share: the off-policy config fields (`config.py`) and the agent built
from them (`agent.py`: networks, optimizers, learner state, exploration and evaluation policies). Neither system
imports the other."""
