"""Scenario table for run_all.py.

Each scenario = a training config (JSON, written to config.json in a neutral
work directory), a data spec for prepare_data.py, optional fixtures, extra
environment variables and one launch style. Nothing here is ever printed
by the job itself.

Launch styles
  tee       torchrun --nproc-per-node=2 finetune.py ... 2>&1 | tee train.log
  logdir    torchrun --nproc-per-node=2 --log-dir torchrun_logs --redirects 3 --tee 3 ... > console.log 2>&1
  twonode   two torchrun agents (--nnodes=2 --nproc-per-node=1, c10d rendezvous) -> node0.log, node1.log
  launcher  python3 launch.py --num-processes 2 finetune.py ... > train.out 2> train.err
  rank0     torchrun --nproc-per-node=2 --local-ranks-filter 0 ... 2>&1 | tee train.log
"""

SCENARIOS = {
    # 1. pipeline: stage 0 raises on one long micro-batch; its emergency
    #    checkpoint barrier and stage 1's recv both wait for the watchdog.
    "pp-stage0-error-hang": {
        "long": True,
        "style": "twonode",
        "config": {
            "run_name": "sft-pp-128",
            "layout": "pipeline",
            "max_seq_length": 128,
            "emergency_checkpoint": True,
            "max_steps": 40,
        },
        "data": {"long_docs": [[0, 28, 97]]},
    },
    # 2. MoE: padding tokens are excluded from the per-expert counts but still
    #    dispatched -> all_to_all_single split sizes disagree with the tensor.
    "moe-pad-split-sizes": {
        "style": "logdir",
        "config": {"run_name": "sft-moe", "model": {"moe_layers": [1, 3]}, "max_steps": 40},
        "data": {"short_docs": [[1, 48, 40]]},
    },
    # 3. MoE: per-expert scale sized by local experts, indexed by global ids
    #    (device-side assert on GPU, IndexError on CPU), on every rank.
    "moe-expert-scale-oob": {
        "style": "tee",
        "config": {"run_name": "sft-moe-v2", "model": {"moe_layers": [1], "moe_expert_scale": True},
                   "max_steps": 40},
        "data": {},
        "cpu_differs": True,
    },
    # 4. truncated .idx shard read by rank 1's prefetch thread; the thread dies,
    #    rank 1 blocks on its queue, rank 0 waits in all-reduce until the watchdog.
    "prefetch-truncated-index-hang": {
        "long": True,
        "style": "rank0",
        "config": {"run_name": "sft-tiny-v2", "max_steps": 40, "logging_steps": 2},
        "data": {"truncate_train_idx": [[3, 0.5]]},
    },
    # 5. per-task metrics callback; rank 1's eval shard has no 'qa' documents.
    #    NCCL_DEBUG=INFO buries the traceback among NCCL lines.
    "eval-task-metrics-keyerror": {
        "style": "tee",
        "config": {"run_name": "sft-multitask", "task_metrics": ["qa", "summ", "cls"], "eval_steps": 40,
                   "max_steps": 60, "logging_steps": 10, "gradient_accumulation_steps": 2},
        "data": {},
        "env": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL"},
    },
    # 6. launcher --gpu-ids 0 with two processes: both ranks on cuda:0.
    "launcher-duplicate-gpu": {
        "style": "launcher",
        "launcher_args": ["--gpu-ids", "0"],
        "config": {"run_name": "sft-tiny", "max_steps": 40},
        "data": {},
        "cuda_only": True,
    },
    # 7. dataset cache fingerprint includes the per-rank seed: rank 1 waits for a
    #    marker that never appears, rank 0 waits in DDP's first collective.
    "dataset-cache-marker-hang": {
        "long": True,
        "style": "logdir",
        "config": {"run_name": "sft-tiny-v3", "dataset_cache_dir": "cache", "seed_per_rank": True,
                   "max_steps": 40},
        "data": {},
        "env": {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "60"},
    },
    # 8. async checkpoint writer: first save fails in the background thread
    #    (checkpoint_dir is an existing file), surfaces at the next save.
    "async-checkpoint-reraise": {
        "style": "rank0",
        "config": {"run_name": "sft-tiny-v4", "async_save": True, "save_steps": 10,
                   "checkpoint_dir": "ckpt/latest", "max_steps": 40},
        "data": {},
        "files": {"ckpt/latest": "global_step120"},
    },
    # 9. resume from a checkpoint whose rng_state_<rank>.pth holds numpy state;
    #    torch.load defaults to weights_only=True -> UnpicklingError on each rank.
    "resume-rng-weights-only": {
        "style": "launcher",
        "config": {"run_name": "sft-tiny", "resume_from_checkpoint": "output/checkpoints", "max_steps": 60},
        "data": {},
        "fixtures": [["ddp-checkpoint", "--out", "output/checkpoints", "--step", "20", "--world-size", "2"]],
    },
    # 10. pipeline resume after enabling lm_head bias: stage 1's optimizer
    #     param groups no longer match the saved ones.
    "pipeline-resume-optimizer-groups": {
        "style": "tee",
        "config": {"run_name": "sft-pp", "layout": "pipeline", "model": {"lm_head_bias": True},
                   "resume_from_checkpoint": "ckpt/pp", "checkpoint_dir": "ckpt/pp", "max_steps": 60},
        "data": {},
        "fixtures": [["pipeline-checkpoint", "--out", "ckpt/pp", "--step", "20", "--set", "model.lm_head_bias=false"]],
    },
    # 11. tokenizer downloaded by global rank 0 into a node-local cache; the
    #     second node's cache is empty.
    "tokenizer-node-local-cache": {
        "long": True,
        "style": "twonode",
        "config": {"run_name": "sft-2node", "tokenizer_hub_dir": "data/hub",
                   "tokenizer_cache_dir": "$NODE_LOCAL_SCRATCH/hf_cache", "max_steps": 40},
        "data": {},
        "node_env": True,
    },
    # 12. a few chat documents end with <|endoftext|> (id 512) but the model has
    #     vocab_size=512: label out of range in cross-entropy on rank 0.
    "label-eos-beyond-vocab": {
        "style": "logdir",
        "config": {"run_name": "sft-chat-mix", "max_steps": 40},
        "data": {"eos_docs": [[0, 40, 8]]},
        "cpu_differs": True,
    },
    # 13. one batch on rank 1 is prompt-only (all labels masked): local loss is
    #     NaN, the loss guard prints a line and calls sys.exit(1).
    "nan-loss-sys-exit": {
        "style": "launcher",
        "config": {"run_name": "sft-tiny", "max_steps": 40},
        "data": {"prompt_only_docs": [[1, 64, 8]]},
    },
    # 14. eval keeps all logits on the GPU and gathers them on rank 0:
    #     rank 0 runs out of memory allocating the gather buffers.
    "eval-gather-logits-oom": {
        "style": "launcher",
        "config": {
            "run_name": "sft-32k",
            "model": {"vocab_size": 32768, "max_position_embeddings": 256},
            "max_seq_length": 256,
            "prediction_loss_only": False,
            "gather_predictions": True,
            "eval_steps": 5,
            "eval_max_batches": 0,
            "per_device_eval_batch_size": 64,
            "max_steps": 20,
            "tokenizer_name": "tiny-bpe-32k",
        },
        "data": {"vocab_size": 32768, "seq_len": 256, "eval_docs_per_shard": 1792, "tokenizer_name": "tiny-bpe-32k"},
        "cuda_only": True,
        "exclusive": True,
    },
}
