"""More than one node: `slurm` starts one launcher per node of an allocation, `netlab` makes
two network namespaces joined by a shaped link on one machine (root) and runs a cell across
them. Both start `ddpbench.run.launch` as a process and import only core and results (never
torch), so the workflow can ask at plan time whether a lab is possible.
"""
