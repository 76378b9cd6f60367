#!/bin/bash
# Runs a small GPT model with Megatron-Lite.
# Every setting below can be overridden from the environment, e.g.
#   TP=1 LAYOUT=fsdp2 bash train.sh

NGPU=${NGPU:-2}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-6000}

TP=${TP:-2}
LAYOUT=${LAYOUT:-megatron}          # megatron | fsdp2
BACKEND=${BACKEND:-nccl}

NUM_LAYERS=${NUM_LAYERS:-2}
HIDDEN=${HIDDEN:-256}
FFN_HIDDEN=${FFN_HIDDEN:-$((4 * HIDDEN))}
HEADS=${HEADS:-8}
SEQ=${SEQ:-128}
MAX_POS=${MAX_POS:-1024}
POS_EMB=${POS_EMB:-learned_absolute}  # learned_absolute | rope
VOCAB_SIZE=${VOCAB_SIZE:-50257}

MBS=${MBS:-4}
GBS=${GBS:-16}
TRAIN_ITERS=${TRAIN_ITERS:-40}
LR=${LR:-3e-4}
MIN_LR=${MIN_LR:-3e-5}
WARMUP=${WARMUP:-5}
PRECISION=${PRECISION:-bf16}        # bf16 | fp16 | fp32
LOSS_SCALE=${LOSS_SCALE:-}          # empty: dynamic loss scaling (fp16 only)

DATA_PATH=${DATA_PATH:-data/corpus_text_document}
CKPT_DIR=${CKPT_DIR:-checkpoints/gpt-tiny}
SAVE_INTERVAL=${SAVE_INTERVAL:-20}
LOG_INTERVAL=${LOG_INTERVAL:-5}
LOG_DIR=${LOG_DIR:-logs/train}
EXTRA_ARGS=${EXTRA_ARGS:-}

export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}

DISTRIBUTED_ARGS=(
    --nproc-per-node "$NGPU"
    --nnodes "$NNODES"
    --node-rank "$NODE_RANK"
    --master-addr "$MASTER_ADDR"
    --master-port "$MASTER_PORT"
)

GPT_MODEL_ARGS=(
    --num-layers "$NUM_LAYERS"
    --hidden-size "$HIDDEN"
    --ffn-hidden-size "$FFN_HIDDEN"
    --num-attention-heads "$HEADS"
    --seq-length "$SEQ"
    --max-position-embeddings "$MAX_POS"
    --position-embedding-type "$POS_EMB"
)

TRAINING_ARGS=(
    --micro-batch-size "$MBS"
    --global-batch-size "$GBS"
    --train-iters "$TRAIN_ITERS"
    --lr "$LR"
    --min-lr "$MIN_LR"
    --lr-decay-style cosine
    --lr-warmup-iters "$WARMUP"
    --weight-decay 0.1
    --clip-grad 1.0
    --seed 1234
)
case "$PRECISION" in
    bf16) TRAINING_ARGS+=(--bf16) ;;
    fp16) TRAINING_ARGS+=(--fp16)
          if [ -n "$LOSS_SCALE" ]; then TRAINING_ARGS+=(--loss-scale "$LOSS_SCALE"); fi ;;
    fp32) ;;
    *) echo "unknown PRECISION=$PRECISION" >&2; exit 1 ;;
esac

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size "$TP"
    --parallel-layout "$LAYOUT"
    --distributed-backend "$BACKEND"
    --distributed-timeout-minutes 1
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --tokenizer-type NullTokenizer
    --vocab-size "$VOCAB_SIZE"
    --num-workers 2
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval "$LOG_INTERVAL"
    --save-interval "$SAVE_INTERVAL"
    --eval-iters 0
    --save "$CKPT_DIR"
    --load "$CKPT_DIR"
    --train-log-dir "$LOG_DIR"
)

torchrun "${DISTRIBUTED_ARGS[@]}" pretrain.py \
    "${GPT_MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    "${EVAL_AND_LOGGING_ARGS[@]}" \
    $EXTRA_ARGS
