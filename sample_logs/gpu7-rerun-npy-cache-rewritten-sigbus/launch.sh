#!/bin/bash
# clipforge launcher
set -e
NGPU=${NGPU:-2}
PORT=${PORT:-29770}
export OMP_NUM_THREADS=4
python -m torch.distributed.run --nnodes 1 --nproc_per_node $NGPU --master_addr 127.0.0.1 --master_port $PORT \
    train.py --config configs/vit_s8.json data.format=npy-cache data.num_workers=0 train.max_steps=400 train.eval_every=0 train.save_every=0
