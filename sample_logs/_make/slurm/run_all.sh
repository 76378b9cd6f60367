#!/bin/bash
# Regenerate the sample_logs/slurm-* folders by running real sbatch jobs on the local test cluster.
#   sample_logs/_make/slurm/run_all.sh [SCENARIO...]      (default: all, in dependency order)
# Scenarios: ok shape-second-node hang-stalled-rank sigkill-rank scancel megatron-tp-heads
#            checkpoint-truncated dataloader-worker-killed code-keyerror time-limit early-exit import-one-node
#            combined-shape combined-sigkill per-task-keyerror per-task-import srun-per-rank-hang srun-per-rank-sigkill
#            combined-hang per-task-time-limit srun-per-rank-shape srun-per-rank-import srun-per-rank-keyerror
#            combined-checkpoint-truncated combined-megatron-tp-heads per-task-dataloader-worker-killed
#            srun-per-rank-early-exit python-missing-one-node master-port-taken master-host-unresolvable
#            per-task-python-missing-one-node combined-master-port-taken srun-per-rank-python-missing
#            srun-per-rank-master-port-taken per-task-hang-stalled-rank srun-per-rank-time-limit combined-early-exit
#            combined-import-one-node per-task-sigkill-rank srun-per-rank-dataloader-worker-killed
#            per-task-checkpoint-truncated srun-per-rank-checkpoint-truncated combined-code-keyerror
#            per-task-megatron-tp-heads srun-per-rank-megatron-tp-heads combined-dataloader-worker-killed
#            script-missing combined-script-missing srun-per-rank-script-missing bad-argument per-task-bad-argument
#            srun-per-rank-bad-argument node-failure combined-node-failure srun-per-rank-node-failure
# Each job gets its own config file (never printed); the job itself is the neutral train.sbatch.in.
# A scenario named after a layout (combined-, per-task-, srun-per-rank-) runs with LAYOUT set to it; the
# others use train.sbatch.in's default layout (torchrun-logs).
# Knobs: SAMPLES_WORK (scratch dir, default /tmp/slurm-samples), PYTHON (default the repo's .venv),
#        SAMPLES_OUT (where the slurm-* folders go, default sample_logs/; the tests use a temp dir).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
WORK=${SAMPLES_WORK:-/tmp/slurm-samples}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
RUN_DIR=$WORK/runs
ALL=(ok shape-second-node hang-stalled-rank sigkill-rank scancel megatron-tp-heads
    checkpoint-truncated dataloader-worker-killed code-keyerror time-limit early-exit import-one-node
    combined-shape combined-sigkill per-task-keyerror per-task-import srun-per-rank-hang srun-per-rank-sigkill
    combined-hang per-task-time-limit srun-per-rank-shape srun-per-rank-import srun-per-rank-keyerror
    combined-checkpoint-truncated combined-megatron-tp-heads per-task-dataloader-worker-killed
    srun-per-rank-early-exit python-missing-one-node master-port-taken master-host-unresolvable
    per-task-python-missing-one-node combined-master-port-taken srun-per-rank-python-missing
    srun-per-rank-master-port-taken per-task-hang-stalled-rank srun-per-rank-time-limit combined-early-exit
    combined-import-one-node per-task-sigkill-rank srun-per-rank-dataloader-worker-killed
    per-task-checkpoint-truncated srun-per-rank-checkpoint-truncated combined-code-keyerror
    per-task-megatron-tp-heads srun-per-rank-megatron-tp-heads combined-dataloader-worker-killed
    script-missing combined-script-missing srun-per-rank-script-missing bad-argument per-task-bad-argument
    srun-per-rank-bad-argument node-failure combined-node-failure srun-per-rank-node-failure)
LAYOUT=torchrun-logs # how train.sbatch.in starts the ranks; a scenario overrides it for one run (LAYOUT=x run ...)

log() { printf '[run_all] %s\n' "$*" >&2; }

setup() {
    bash "$REPO/tests/slurm/local-slurm.sh" up
    mkdir -p "$RUN_DIR" "$WORK/code" "$WORK/configs"
    cp "$HERE/train.py" "$WORK/code/train.py"
    sed -e "s|@RUN_DIR@|$RUN_DIR|g" -e "s|@PYTHON@|$PYTHON|g" -e "s|@TRAIN@|$WORK/code/train.py|g" \
        "$HERE/train.sbatch.in" >"$WORK/train.sbatch"
}

# config JSON_ARGS_OVERRIDES JSON_PER_RANK: a config file path (numbered, so its name says nothing).
CONFIG_N=0
config() {
    local args=$1 per_rank=$2 path
    CONFIG_N=$((CONFIG_N + 1))
    path=$WORK/configs/c$$-$CONFIG_N.json
    "$PYTHON" - "$args" "$per_rank" >"$path" <<'PY'
import json, sys
args = {"train_iters": 20, "log_interval": 5, "micro_batch_size": 8, "width": 16, "hidden": 32,
        "lr": 0.001, "seed": 1234, "samples_per_rank": 256, "num_workers": 1, "step_sleep": 0.05,
        "load": None, "save": None}
args.update(json.loads(sys.argv[1]))
print(json.dumps({"timeout_s": 30, "args": args, "per_rank": json.loads(sys.argv[2])}, indent=1))
PY
    echo "$path"
}

submit() { # submit CONFIG [sbatch options...] -> job id
    local cfg=$1
    shift
    (cd "$RUN_DIR" && sbatch --parsable --export=ALL,TRAIN_CONFIG="$cfg",LAYOUT="$LAYOUT" "$@" "$WORK/train.sbatch")
}

wait_job() {
    while [[ -n $(squeue -h -j "$1" -o %i 2>/dev/null) ]]; do sleep 1; done
    sleep 1
}

collect() { # collect NAME JOBID: copy the job's files, as written, into sample_logs/slurm-NAME
    local name=$1 id=$2 dest=${SAMPLES_OUT:-$REPO/sample_logs}/slurm-$1 f
    mkdir -p "$dest"
    find "$dest" -mindepth 1 -maxdepth 1 ! -name expected.toml -exec rm -rf {} +
    cp -p "$RUN_DIR/slurm-$id.out" "$RUN_DIR/slurm-$id.err" "$dest/"
    # whichever the layout wrote: the torchrun --log-dir tree, or per-task files train-<id>-<task>.{out,err}
    if [[ -d $RUN_DIR/$id/torchrun-logs ]]; then cp -a "$RUN_DIR/$id/torchrun-logs" "$dest/"; fi
    for f in "$RUN_DIR/train-$id"-*.out "$RUN_DIR/train-$id"-*.err; do
        if [[ -f $f ]]; then cp -p "$f" "$dest/"; fi
    done
    sacct -j "$id" -P -o JobID,JobName,State,ExitCode,Elapsed,NodeList >"$dest/sacct.txt"
    log "$name: job $id $(sacct -X -n -P -j "$id" -o State,ExitCode) -> $dest ($(du -sh "$dest" | cut -f1))"
}

run() { # run NAME CONFIG [sbatch options...]: submit, wait, collect
    local name=$1 id
    shift
    id=$(submit "$@")
    log "$name: submitted job $id"
    wait_job "$id"
    collect "$name" "$id"
}

# truncated_ckpt: copy the checkpoint written by "ok" to $WORK/ckpt-resume with rank 4's shard cut to 4 KiB
# (the checkpoint is written first, without collecting, when "ok" has not run).
truncated_ckpt() {
    if [[ ! -f $WORK/ckpt/latest_checkpointed_iteration.txt ]]; then
        wait_job "$(submit "$(config "{\"save\": \"$WORK/ckpt\"}" '{}')")"
    fi
    rm -rf "$WORK/ckpt-resume"
    cp -a "$WORK/ckpt" "$WORK/ckpt-resume"
    truncate -s 4096 "$WORK/ckpt-resume/iter_0000020/mp_rank_04/model_optim_rng.pt"
}

scenario() {
    local per_rank
    case $1 in
        ok) # clean run that also writes the checkpoint the checkpoint scenario loads
            rm -rf "$WORK/ckpt"
            run ok "$(config "{\"save\": \"$WORK/ckpt\"}" '{}')" ;;
        shape-second-node) # rank 6's data shard has 20 features instead of 16
            run shape-second-node "$(config '{}' '{"6": {"width": 20}}')" ;;
        hang-stalled-rank) # rank 5 waits for a staging marker that never appears
            rm -rf "$WORK/staging"
            per_rank="{\"5\": {\"ready_file\": \"$WORK/staging/shard-00005.done\"}}"
            run hang-stalled-rank "$(config '{}' "$per_rank")" ;;
        sigkill-rank)
            run sigkill-rank "$(config '{}' '{"7": {"sigkill_at": 6}}')" ;;
        scancel) # long run, cancelled once it has logged a few iterations
            local id
            id=$(submit "$(config '{"train_iters": 100000, "log_interval": 20, "step_sleep": 0.1}' '{}')")
            log "scancel: submitted job $id"
            until [[ $(grep -c 'iteration' "$RUN_DIR/slurm-$id.out" 2>/dev/null) -ge 3 ]]; do sleep 1; done
            scancel "$id"
            wait_job "$id"
            collect scancel "$id" ;;
        node-failure | combined-node-failure | srun-per-rank-node-failure)
            # long run; the job's node is marked DOWN under it, as slurmctld does when a node dies
            local id node layout=torchrun-logs extra=()
            case $1 in combined-*) layout=combined ;; srun-per-rank-*) layout=srun-per-rank extra=(--ntasks=8) ;; esac
            id=$(LAYOUT=$layout submit "$(config '{"train_iters": 100000, "log_interval": 20, "step_sleep": 0.1}' '{}')" \
                --no-requeue "${extra[@]}")
            log "$1: submitted job $id"
            until [[ $(grep -c 'iteration' "$RUN_DIR/slurm-$id.out" 2>/dev/null) -ge 3 ]]; do sleep 1; done
            node=$(squeue -h -j "$id" -o %N)
            scontrol update NodeName="$node" State=DOWN Reason="node-failure scenario"
            wait_job "$id"
            # back in service (slurmd answering may already have returned it: then RESUME is refused)
            scontrol update NodeName="$node" State=RESUME 2>/dev/null || true
            collect "$1" "$id" ;;
        megatron-tp-heads) # 12 heads cannot be split over tensor parallel size 8
            run megatron-tp-heads "$(config '{"use_mcore_models": true, "num_layers": 2, "hidden_size": 768,
                "num_attention_heads": 12, "ffn_hidden_size": 3072, "seq_length": 1024,
                "max_position_embeddings": 1024, "tensor_model_parallel_size": 8,
                "pipeline_model_parallel_size": 1, "context_parallel_size": 1, "global_batch_size": 64,
                "bf16": false, "fp16": false, "tokenizer_type": "GPT2BPETokenizer"}' '{}')" ;;
        checkpoint-truncated) # rank 4's shard of the checkpoint written by "ok" is cut short
            truncated_ckpt
            run checkpoint-truncated "$(config "{\"load\": \"$WORK/ckpt-resume\", \"train_iters\": 40}" '{}')" ;;
        code-keyerror) # rank 5 is configured with an auxiliary loss term the code does not know
            run code-keyerror "$(config '{}' '{"5": {"loss_terms": ["mse", "z_loss"]}}')" ;;
        dataloader-worker-killed) # rank 1's loader worker dies while producing sample 40
            run dataloader-worker-killed "$(config '{}' '{"1": {"worker_sigkill_at": 40}}')" ;;
        early-exit) # rank 6 (second node) runs out of data after 8 iterations and returns without an error
            run early-exit "$(config '{}' '{"6": {"stop_after": 8}}')" ;;
        import-one-node) # rank 5's environment (second node) lacks a module the job imports
            run import-one-node "$(config '{}' '{"5": {"extra_import": "apex"}}')" ;;
        combined-shape) # as shape-second-node, with all ranks' output in slurm-<id>.out/.err only
            LAYOUT=combined run combined-shape "$(config '{}' '{"6": {"width": 20}}')" ;;
        combined-sigkill) # as sigkill-rank, combined layout
            LAYOUT=combined run combined-sigkill "$(config '{}' '{"7": {"sigkill_at": 6}}')" ;;
        per-task-keyerror) # as code-keyerror, one output file pair per srun task
            LAYOUT=per-task run per-task-keyerror "$(config '{}' '{"5": {"loss_terms": ["mse", "z_loss"]}}')" ;;
        per-task-import) # as import-one-node, per-task layout
            LAYOUT=per-task run per-task-import "$(config '{}' '{"5": {"extra_import": "apex"}}')" ;;
        srun-per-rank-hang) # as hang-stalled-rank (rank 3 this time), eight srun tasks and no torchrun
            rm -rf "$WORK/staging"
            per_rank="{\"3\": {\"ready_file\": \"$WORK/staging/shard-00003.done\"}}"
            LAYOUT=srun-per-rank run srun-per-rank-hang "$(config '{}' "$per_rank")" --ntasks=8 ;;
        srun-per-rank-sigkill) # rank 2 SIGKILLs itself at iteration 6, eight srun tasks and no torchrun
            LAYOUT=srun-per-rank run srun-per-rank-sigkill "$(config '{}' '{"2": {"sigkill_at": 6}}')" --ntasks=8 ;;
        combined-hang) # as hang-stalled-rank (rank 5 waits for a staging marker), combined layout
            rm -rf "$WORK/staging"
            per_rank="{\"5\": {\"ready_file\": \"$WORK/staging/shard-00005.done\"}}"
            LAYOUT=combined run combined-hang "$(config '{}' "$per_rank")" ;;
        per-task-time-limit) # as time-limit, per-task layout
            LAYOUT=per-task run per-task-time-limit \
                "$(config '{"train_iters": 100000, "log_interval": 50, "step_sleep": 0.1}' '{}')" --time=00:01:00 ;;
        srun-per-rank-shape) # as shape-second-node (rank 6 gets 20 features), eight srun tasks and no torchrun
            LAYOUT=srun-per-rank run srun-per-rank-shape "$(config '{}' '{"6": {"width": 20}}')" --ntasks=8 ;;
        srun-per-rank-import) # as import-one-node (rank 5 imports apex), eight srun tasks and no torchrun
            LAYOUT=srun-per-rank run srun-per-rank-import "$(config '{}' '{"5": {"extra_import": "apex"}}')" --ntasks=8 ;;
        srun-per-rank-keyerror) # as code-keyerror (rank 3 this time), eight srun tasks and no torchrun
            LAYOUT=srun-per-rank run srun-per-rank-keyerror \
                "$(config '{}' '{"3": {"loss_terms": ["mse", "z_loss"]}}')" --ntasks=8 ;;
        combined-checkpoint-truncated) # as checkpoint-truncated (rank 4's shard cut short), combined layout
            truncated_ckpt
            LAYOUT=combined run combined-checkpoint-truncated \
                "$(config "{\"load\": \"$WORK/ckpt-resume\", \"train_iters\": 40}" '{}')" ;;
        combined-megatron-tp-heads) # as megatron-tp-heads (12 heads over tensor parallel size 8), combined layout
            LAYOUT=combined run combined-megatron-tp-heads "$(config '{"use_mcore_models": true, "num_layers": 2,
                "hidden_size": 768, "num_attention_heads": 12, "ffn_hidden_size": 3072, "seq_length": 1024,
                "max_position_embeddings": 1024, "tensor_model_parallel_size": 8,
                "pipeline_model_parallel_size": 1, "context_parallel_size": 1, "global_batch_size": 64,
                "bf16": false, "fp16": false, "tokenizer_type": "GPT2BPETokenizer"}' '{}')" ;;
        per-task-dataloader-worker-killed) # as dataloader-worker-killed (rank 1's worker dies), per-task layout
            LAYOUT=per-task run per-task-dataloader-worker-killed \
                "$(config '{}' '{"1": {"worker_sigkill_at": 40}}')" ;;
        srun-per-rank-early-exit) # as early-exit (rank 6 returns after 8 iterations), eight srun tasks, no torchrun
            LAYOUT=srun-per-rank run srun-per-rank-early-exit "$(config '{}' '{"6": {"stop_after": 8}}')" --ntasks=8 ;;
        python-missing-one-node) # node 1's environment lacks the interpreter the job names; node 0 waits
            NODE_PYTHON_1=/opt/venvs/train/bin/python run python-missing-one-node "$(config '{}' '{}')" \
                --time=00:01:00 ;;
        master-port-taken | combined-master-port-taken | srun-per-rank-master-port-taken)
            # the job pins port 29500, which another process on the master node holds (srun-per-rank: env:// init)
            local layout=torchrun-logs extra=() holder
            case $1 in combined-*) layout=combined ;; srun-per-rank-*) layout=srun-per-rank extra=(--ntasks=8) ;; esac
            "$PYTHON" -c 'import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 29500))
s.listen(); time.sleep(300)' &
            holder=$!
            sleep 1
            MASTER_PORT_FIXED=29500 LAYOUT=$layout run "$1" "$(config '{}' '{}')" "${extra[@]}" --time=00:01:00
            kill "$holder" ;;
        per-task-megatron-tp-heads | srun-per-rank-megatron-tp-heads) # as megatron-tp-heads, other layouts
            local layout=${1%-megatron-tp-heads} extra=()
            if [[ $layout == srun-per-rank ]]; then extra=(--ntasks=8); fi
            LAYOUT=$layout run "$1" "$(config '{"use_mcore_models": true, "num_layers": 2, "hidden_size": 768,
                "num_attention_heads": 12, "ffn_hidden_size": 3072, "seq_length": 1024,
                "max_position_embeddings": 1024, "tensor_model_parallel_size": 8,
                "pipeline_model_parallel_size": 1, "context_parallel_size": 1, "global_batch_size": 64,
                "bf16": false, "fp16": false, "tokenizer_type": "GPT2BPETokenizer"}' '{}')" "${extra[@]}" ;;
        combined-dataloader-worker-killed) # as dataloader-worker-killed (rank 1's worker dies), combined layout
            LAYOUT=combined run combined-dataloader-worker-killed "$(config '{}' '{"1": {"worker_sigkill_at": 40}}')" ;;
        per-task-checkpoint-truncated) # as checkpoint-truncated (rank 4's shard cut short), per-task layout
            truncated_ckpt
            LAYOUT=per-task run per-task-checkpoint-truncated \
                "$(config "{\"load\": \"$WORK/ckpt-resume\", \"train_iters\": 40}" '{}')" ;;
        srun-per-rank-checkpoint-truncated) # as checkpoint-truncated, one srun task per rank
            truncated_ckpt
            LAYOUT=srun-per-rank run srun-per-rank-checkpoint-truncated \
                "$(config "{\"load\": \"$WORK/ckpt-resume\", \"train_iters\": 40}" '{}')" --ntasks=8 ;;
        combined-code-keyerror) # as code-keyerror (rank 5's unknown loss term), combined layout
            LAYOUT=combined run combined-code-keyerror "$(config '{}' '{"5": {"loss_terms": ["mse", "z_loss"]}}')" ;;
        combined-import-one-node) # as import-one-node (rank 5 imports apex), combined layout
            LAYOUT=combined run combined-import-one-node "$(config '{}' '{"5": {"extra_import": "apex"}}')" ;;
        per-task-sigkill-rank) # as sigkill-rank (rank 7 SIGKILLs itself at iteration 6), per-task layout
            LAYOUT=per-task run per-task-sigkill-rank "$(config '{}' '{"7": {"sigkill_at": 6}}')" ;;
        srun-per-rank-dataloader-worker-killed) # as dataloader-worker-killed (rank 1's worker dies), srun per rank
            LAYOUT=srun-per-rank run srun-per-rank-dataloader-worker-killed \
                "$(config '{}' '{"1": {"worker_sigkill_at": 40}}')" --ntasks=8 ;;
        per-task-hang-stalled-rank) # as hang-stalled-rank (rank 5 waits for a marker that never appears), per-task
            rm -rf "$WORK/staging"
            per_rank="{\"5\": {\"ready_file\": \"$WORK/staging/shard-00005.done\"}}"
            LAYOUT=per-task run per-task-hang-stalled-rank "$(config '{}' "$per_rank")" ;;
        srun-per-rank-time-limit) # as time-limit (training runs past --time=00:01:00), one srun task per rank
            LAYOUT=srun-per-rank run srun-per-rank-time-limit \
                "$(config '{"train_iters": 100000, "log_interval": 50, "step_sleep": 0.1}' '{}')" --ntasks=8 --time=00:01:00 ;;
        combined-early-exit) # as early-exit (rank 6 returns after 8 iterations), combined layout
            LAYOUT=combined run combined-early-exit "$(config '{}' '{"6": {"stop_after": 8}}')" ;;
        srun-per-rank-python-missing) # rank 5's task lacks the interpreter (exit 127); srun ends the step
            NODE_PYTHON_5=/opt/venvs/train/bin/python LAYOUT=srun-per-rank run srun-per-rank-python-missing \
                "$(config '{}' '{}')" --ntasks=8 --time=00:01:00 ;;
        per-task-python-missing-one-node) # as python-missing-one-node, per-task layout
            NODE_PYTHON_1=/opt/venvs/train/bin/python LAYOUT=per-task run per-task-python-missing-one-node \
                "$(config '{}' '{}')" --time=00:01:00 ;;
        master-host-unresolvable) # MASTER_ADDR names a host that does not resolve (a typo, another cluster)
            MASTER_HOST=train-master-0 run master-host-unresolvable "$(config '{}' '{}')" --time=00:01:00 ;;
        script-missing | combined-script-missing | srun-per-rank-script-missing) # the job names a misspelled script
            local layout=torchrun-logs extra=()
            case $1 in combined-*) layout=combined ;; srun-per-rank-*) layout=srun-per-rank extra=(--ntasks=8) ;; esac
            TRAIN_SCRIPT=$WORK/code/trian.py LAYOUT=$layout run "$1" "$(config '{}' '{}')" "${extra[@]}" ;;
        bad-argument | per-task-bad-argument | srun-per-rank-bad-argument) # a Megatron-style flag the script lacks
            local layout=torchrun-logs extra=()
            case $1 in per-task-*) layout=per-task ;; srun-per-rank-*) layout=srun-per-rank extra=(--ntasks=8) ;; esac
            TRAIN_ARGS="--micro-batch-size 8" LAYOUT=$layout run "$1" "$(config '{}' '{}')" "${extra[@]}" ;;
        time-limit)
            run time-limit "$(config '{"train_iters": 100000, "log_interval": 50, "step_sleep": 0.1}' '{}')" \
                --time=00:01:00 ;;
        *)
            log "unknown scenario $1"
            return 2 ;;
    esac
}

setup
if (($# == 0)); then set -- "${ALL[@]}"; fi
for s in "$@"; do scenario "$s"; done
