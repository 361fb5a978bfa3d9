"""Spreeze (seed 002): asynchronous single-desktop RL -- samplers, learner, weights by file, automatic tuning."""
