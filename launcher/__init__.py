"""Run distributed training on SLURM the way the seed guide prescribes, capture every rank, diagnose failures."""
