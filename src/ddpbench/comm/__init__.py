"""Collective communication on its own, apart from training.

`collectives` holds the hand-written ring all-reduce (used by the ring_allreduce strategy and
the sweep); `commbench` sweeps collectives over message sizes under torchrun (nccl-tests'
algbw/busbw); `commfit` fits latency and bandwidth to a sweep. `commfit` imports no torch:
the analysis reuses its fits. They import core only.
"""
