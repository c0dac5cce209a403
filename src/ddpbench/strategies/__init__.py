"""Gradient-synchronisation strategies: one module each, discovered by name.

A strategy module `ddpbench/strategies/<name>.py` defines `STRATEGY`, an instance of
`ddpbench.strategies.base.Strategy`; `get(name)` imports it on demand, so listing the
registry (for validation) never imports torch.
"""
