#!/bin/bash
# shard 1's raw events were re-delivered: re-run the preprocessing for that shard, then train once it is done
set -euo pipefail
cat > prep.sbatch <<'PREP'
#!/bin/bash
#SBATCH --job-name=tt-prep
#SBATCH --ntasks=1
#SBATCH --time=00:05:00
#SBATCH --output=%x-%j.out
cd "$SLURM_SUBMIT_DIR"
srun ${RETRIEVAL_PY:-/work/main/.venv/bin/python} make_data.py --out data --shards 1
PREP
prep=$(sbatch --parsable prep.sbatch)
echo "Submitted batch job $prep"
sbatch --dependency=afterok:$prep job.sbatch
