#!/bin/bash
# submit prep -> train; train only starts when prep finished OK
set -e
PREP=$(sbatch --parsable jobs/prep.sbatch)
TRAIN=$(sbatch --parsable --dependency=afterok:$PREP jobs/train_torchrun.sbatch)
echo "$PREP $TRAIN"
