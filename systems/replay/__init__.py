"""Replay for off-policy agents: PAL's K-ary sum tree and thread-safe prioritized / uniform buffers (seed 003)."""

from systems.replay.buffers import PrioritizedBuffer, ReplayBuffer, Sample, UniformBuffer
from systems.replay.frames import FrameStackBuffer
from systems.replay.sum_tree import SumTree

__all__ = ["FrameStackBuffer", "PrioritizedBuffer", "ReplayBuffer", "Sample", "SumTree", "UniformBuffer"]
