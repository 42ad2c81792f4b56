"""The Slurm backend: jobs on a Slurm cluster through sbatch, squeue, scontrol and scancel.

``backend.SlurmBackend`` is the backend (registered by name in ``backends/base.py``); this
package imports nothing at load, so the node-side ``runner`` starts without the toolkit.
"""
