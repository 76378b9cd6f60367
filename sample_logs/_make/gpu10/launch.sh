#!/bin/bash
# per-rank launcher: pin each local rank to its own GPU, then start the trainer
export CUDA_VISIBLE_DEVICES=${LOCAL_RANK:-0}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
exec python train.py "$@"
