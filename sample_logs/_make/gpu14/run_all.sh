#!/usr/bin/env bash
# gpu14 generator: run each scenario of the GPT pretraining project in a fresh, neutrally named
# directory and keep every log it wrote under $RESULTS/gpu14-<scenario>/.
#
#   sample_logs/_make/gpu14/run_all.sh                 # all scenarios (one H200)
#   sample_logs/_make/gpu14/run_all.sh heads-indivisible wandb-missing
#   DEVICE=cpu sample_logs/_make/gpu14/run_all.sh ...  # CPU fallback (tiny model, gloo) to test the harness
#
# Environment: RESULTS (default /tmp/gpu14-results), PYTHON (default python3; its bin dir must hold torchrun),
# OUT (if set, results are packed into $OUT/gpu14-results.tgz), DEVICE (cuda | cpu).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
RESULTS=${RESULTS:-/tmp/gpu14-results}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
PYBIN=$(dirname "$(command -v "$PYTHON")")
export PATH="$PYBIN:$PATH"
if ! command -v torchrun > /dev/null; then   # no console script: a shim that runs torch.distributed.run
  SHIM=$(mktemp -d /tmp/bin-XXXXXX)
  printf '#!/bin/sh\nexec "%s" -m torch.distributed.run "$@"\n' "$(command -v "$PYTHON")" > "$SHIM/torchrun"
  chmod +x "$SHIM/torchrun"; export PATH="$SHIM:$PATH"
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
unset CUDA_LAUNCH_BLOCKING TORCH_DISTRIBUTED_DEBUG
mkdir -p "$RESULTS"

# sizes (GPU defaults; the CPU fallback shrinks them)
if [ "$DEVICE" = cpu ]; then
  HW="system.device=cpu system.dtype=float32 system.backend=gloo model.n_layer=2 model.n_embd=128 model.n_head=4 train.micro_batch_size=4 train.grad_accum_steps=1"
  TRAIN_TOK=400K; LONG_DOC=3000; LONG_TOK=600K; LONG_CTX=2048; VAL_BIG=12M; VAL_SMALL=16K; RATE=0.002; BLOCK=128
  HW="$HW model.block_size=$BLOCK"
else
  HW=""
  TRAIN_TOK=4M; LONG_DOC=90000; LONG_TOK=12M; LONG_CTX=65536; VAL_BIG=250M; VAL_SMALL=256K; RATE=0.00004; BLOCK=1024
fi

say() { echo "[run_all $(date +%T)] $*" >&2; }

new_job_dir() {           # fresh random directory holding a copy of the project
  JOB=$(mktemp -d /tmp/lm-XXXXXXXX)
  cp -r "$HERE/project/." "$JOB/"
  find "$JOB" -name __pycache__ -prune -exec rm -rf {} +
  PORT=$(( 20000 + RANDOM % 20000 ))
}

prep() { (cd "$JOB" && "$PYTHON" prepare_data.py --out data/tokens "$@" > /dev/null) || say "prepare_data failed"; }

wait_for() {              # wait_for FILE REGEX SECONDS
  local i
  for ((i = 0; i < $3 * 5; i++)); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

collect() {               # copy every log the job wrote, keeping relative paths
  local name=$1 dest="$RESULTS/gpu14-$1"
  rm -rf "$dest"; mkdir -p "$dest"
  (cd "$JOB" && find . -type f \( -name '*.log' -o -name '*.out' -o -name '*.err' -o -name 'error.json' \
      -o -path './logs/*' \) -not -path './data/*' -not -path './out/*' -print0 |
    while IFS= read -r -d '' f; do mkdir -p "$dest/$(dirname "$f")"; cp -p "$f" "$dest/$f"; done)
  say "$name: $(cd "$dest" && find . -type f | wc -l) files -> $dest"
  rm -rf "$JOB"
}

# ---------------------------------------------------------------------------------------------------------
# rank 1's shard holds book-length documents; documents mode pads each batch to its longest document,
# so rank 1's micro-batch is 8 x 65536 tokens: CUDA OOM under the per-process memory cap; ranks 0/2 wait.
sc_long-docs-oom() {
  new_job_dir
  prep --train-shards 3 --val-shards 3 --train-tokens $TRAIN_TOK --shard-doc-len 1:$LONG_DOC --shard-tokens 1:$LONG_TOK
  (cd "$JOB" && timeout -s TERM 80 torchrun --standalone --nproc-per-node 3 train.py --config configs/shared-gpu.json \
      $HW data.mode=documents data.max_seq_len=$LONG_CTX model.block_size=$LONG_CTX 2>&1 | tee train.log > /dev/null)
  collect long-docs-oom
}

# shard 2 was re-encoded with the chat tokenizer revision: a few ids >= vocab_size; embedding lookup asserts
sc_vocab-assert-async() {
  new_job_dir
  prep --train-shards 3 --val-shards 3 --train-tokens $TRAIN_TOK --tokenizer-rev 2:$RATE
  (cd "$JOB" && timeout -s TERM 80 torchrun --nproc-per-node 3 --master-port $PORT --log-dir logs --redirects 3 --tee 3 \
      train.py --config configs/shared-gpu.json $HW train.max_steps=200 > console.log 2>&1)
  collect vocab-assert-async
}

# same defect on shard 1, user re-runs with CUDA_LAUNCH_BLOCKING=1; stdout and stderr to separate files
sc_vocab-assert-blocking() {
  new_job_dir
  prep --train-shards 2 --val-shards 2 --train-tokens $TRAIN_TOK --tokenizer-rev 1:$RATE
  (cd "$JOB" && CUDA_LAUNCH_BLOCKING=1 timeout -s TERM 80 torchrun --nproc-per-node 2 --master-port $PORT \
      train.py --config configs/shared-gpu.json $HW system.gpu_memory_fraction=0.45 train.max_steps=200 \
      > train.out 2> train.err)
  collect vocab-assert-blocking
}

# n_head=10 with n_embd=768: head_dim 76, q.view fails; one process, NCCL world size 1
sc_heads-indivisible() {
  new_job_dir
  prep --train-shards 1 --val-shards 1 --train-tokens $TRAIN_TOK
  (cd "$JOB" && timeout -s TERM 60 torchrun --nproc-per-node 1 --master-port $PORT train.py --config configs/gpt2-124m.json \
      $HW model.n_head=10 > stdout.log 2> stderr.log)
  collect heads-indivisible
}

# first run saves a checkpoint; the file is cut short (the job hit its time limit while writing it);
# the re-run with train.resume=auto fails in torch.load. Both runs appended to one train.log.
sc_resume-truncated-ckpt() {
  new_job_dir
  prep --train-shards 1 --val-shards 1 --train-tokens $TRAIN_TOK
  (cd "$JOB" && timeout -s TERM 60 torchrun --nproc-per-node 1 --master-port $PORT train.py --config configs/gpt2-124m.json \
      $HW train.max_steps=20 train.ckpt_every=20 2>&1 | tee -a train.log > /dev/null)
  "$PYTHON" -c "import os,sys; p=sys.argv[1]; os.truncate(p, int(os.path.getsize(p)*0.62))" "$JOB/out/ckpt.pt" \
    || say "no checkpoint to cut"
  (cd "$JOB" && timeout -s TERM 60 torchrun --nproc-per-node 1 --master-port $PORT train.py --config configs/gpt2-124m.json \
      $HW train.max_steps=40 train.ckpt_every=20 train.resume=auto 2>&1 | tee -a train.log > /dev/null)
  collect resume-truncated-ckpt
}

# --nproc-per-node 2 on a box with one GPU: rank 1's torch.cuda.set_device(1) fails; per-rank files
sc_nproc-exceeds-gpus() {
  new_job_dir
  prep --train-shards 2 --val-shards 2 --train-tokens $TRAIN_TOK
  (cd "$JOB" && timeout -s TERM 60 torchrun --nproc-per-node 2 --master-port $PORT --log-dir logs --redirects 3 \
      train.py --config configs/gpt2-124m.json $HW > launcher.log 2>&1)
  collect nproc-exceeds-gpus
}

# CUDA_VISIBLE_DEVICES left empty by the shell: every rank fails at set_device
sc_no-visible-gpus() {
  new_job_dir
  prep --train-shards 2 --val-shards 2 --train-tokens $TRAIN_TOK
  (cd "$JOB" && CUDA_VISIBLE_DEVICES= timeout -s TERM 60 torchrun --nproc-per-node 2 --master-port $PORT \
      train.py --config configs/shared-gpu.json $HW 2>&1 | tee train.log > /dev/null)
  collect no-visible-gpus
}

# torch.compile(fullgraph=True) cannot trace the all-padding guard in GPT.forward (data-dependent branch)
sc_compile-padding-guard() {
  new_job_dir
  prep --train-shards 1 --val-shards 1 --train-tokens $TRAIN_TOK
  (cd "$JOB" && timeout -s TERM 90 torchrun --nproc-per-node 1 --master-port $PORT train.py --config configs/gpt2-124m.json \
      $HW train.compile=true train.compile_fullgraph=true 'system.log_file=logs/train_rank{rank}.log' > train.log 2>&1)
  collect compile-padding-guard
}

# a DataLoader worker of rank 1 is SIGKILLed (as the host OOM killer does) during training
sc_loader-worker-killed() {
  new_job_dir
  prep --train-shards 3 --val-shards 3 --train-tokens $TRAIN_TOK
  (cd "$JOB" && timeout -s TERM 80 torchrun --nproc-per-node 3 --master-port $PORT --log-dir logs --redirects 3 --tee 3 \
      train.py --config configs/shared-gpu.json $HW train.max_steps=5000 train.eval_every=0 > console.log 2>&1) &
  local bg=$!
  if wait_for "$JOB/console.log" 'step +6 \|' 60; then
    local pid; pid=$("$HERE/findrank.py" --rank 1 --loader-worker --cwd "$JOB")
    if [ -n "$pid" ]; then kill -KILL "$pid"; else say "no loader worker of rank 1 found"; fi
  else
    say "training never reached step 6"
  fi
  wait $bg
  collect loader-worker-killed
}

# validation: data.val_batches=0 evaluates the whole val shard; shard 2 is huge, so rank 2 stays in its eval
# loop while ranks 0/1 wait in the val-loss all-reduce (gloo, 30 s timeout)
sc_uneven-val-hang() {
  new_job_dir
  prep --train-shards 3 --val-shards 3 --train-tokens $TRAIN_TOK --val-tokens-default $VAL_SMALL --val-tokens 2:$VAL_BIG
  (cd "$JOB" && timeout -s TERM 100 torchrun --nproc-per-node 3 --master-port $PORT --role trainer --tee 3 \
      train.py --config configs/shared-gpu.json $HW data.val_batches=0 train.eval_every=5 2>&1 | tee run.log > /dev/null)
  collect uneven-val-hang
}

# two torchrun agents ("nodes") on localhost, 2 ranks each; global rank 3 (node 1) is SIGKILLed
sc_node1-sigkill() {
  new_job_dir
  prep --train-shards 4 --val-shards 4 --train-tokens $TRAIN_TOK
  local common="--nnodes 2 --nproc-per-node 2 --master-addr 127.0.0.1 --master-port $PORT"
  (cd "$JOB" && timeout -s TERM 80 torchrun $common --node-rank 0 train.py --config configs/shared-gpu.json $HW \
      system.gpu_memory_fraction=0.2 train.max_steps=5000 train.eval_every=0 > node0.log 2>&1) &
  local bg0=$!
  sleep 1
  (cd "$JOB" && timeout -s TERM 80 torchrun $common --node-rank 1 train.py --config configs/shared-gpu.json $HW \
      system.gpu_memory_fraction=0.2 train.max_steps=5000 train.eval_every=0 > node1.log 2>&1) &
  local bg1=$!
  if wait_for "$JOB/node0.log" 'step +4 \|' 60; then
    local pid; pid=$("$HERE/findrank.py" --rank 3 --cwd "$JOB")
    if [ -n "$pid" ]; then kill -KILL "$pid"; else say "rank 3 not found"; fi
  else
    say "training never reached step 4"
  fi
  wait $bg0 $bg1
  collect node1-sigkill
}

# experiment tracking switched on, wandb not installed in the environment
sc_wandb-missing() {
  new_job_dir
  prep --train-shards 2 --val-shards 2 --train-tokens $TRAIN_TOK
  (cd "$JOB" && timeout -s TERM 60 torchrun --nproc-per-node 2 --master-port $PORT --log-dir logs --redirects 3 --tee 3 \
      train.py --config configs/shared-gpu.json $HW system.wandb=true > console.log 2>&1)
  collect wandb-missing
}

ALL="long-docs-oom vocab-assert-async vocab-assert-blocking heads-indivisible resume-truncated-ckpt nproc-exceeds-gpus
no-visible-gpus compile-padding-guard loader-worker-killed uneven-val-hang node1-sigkill wandb-missing"
SCEN=${*:-$ALL}
T0=$(date +%s)
{
  echo "host: $(hostname)  date: $(date -Is)  device: $DEVICE"
  "$PYTHON" -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None, 'numpy', numpy.__version__)" 2>&1
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} > "$RESULTS/versions.txt" 2>&1
for s in $SCEN; do
  t=$(date +%s)
  say "start $s"
  "sc_$s"
  say "done $s in $(( $(date +%s) - t )) s"
  echo "$s $(( $(date +%s) - t ))s" >> "$RESULTS/timings.txt"
done
say "all done in $(( $(date +%s) - T0 )) s"
if [ -n "${OUT:-}" ]; then
  tar czf "$OUT/gpu14-results.tgz" -C "$RESULTS" .
  say "packed $OUT/gpu14-results.tgz"
fi
