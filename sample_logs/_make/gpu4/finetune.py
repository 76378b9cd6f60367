"""Supervised fine-tuning of a small decoder-only LM.

    torchrun --nproc-per-node=2 finetune.py --config config.json [--set key=value ...]

layout=ddp       : data parallel (DistributedDataParallel), optional MoE layers
                   with expert parallelism over all ranks
layout=pipeline  : two pipeline stages (stage s on rank s), micro-batches
                   exchanged with isend/irecv
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import warnings

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from callbacks import (
    AsyncCheckpointCallback,
    EmergencyCheckpointCallback,
    LossGuardCallback,
    ProgressCallback,
    TaskMetricsCallback,
)
from data import (
    PrefetchingShardStream,
    SFTCollator,
    Tokenizer,
    build_or_wait_for_cache,
    download_tokenizer,
    list_shards,
    shard_num_docs,
    shards_for_rank,
)
from dist_utils import cleanup, env_ranks, init_distributed, logger, setup_logging
from modeling import ModelConfig, build_model, build_stage, count_parameters, expert_parameter_names
from trainer import DataParallelEngine, PipelineEngine, Trainer, build_optimizer, build_scheduler
from trainer_utils import set_seed

DEFAULT_CONFIG = {
    "run_name": "sft-tiny",
    "output_dir": "output",
    "data_dir": "data",
    "layout": "ddp",
    "pipeline_stages": 2,
    "pipeline_split": None,
    "pipeline_micro_batches": 4,
    "model": {
        "vocab_size": 512,
        "d_model": 64,
        "n_layers": 4,
        "n_heads": 4,
        "d_ff": 128,
        "max_position_embeddings": 64,
        "rope_theta": 10000.0,
        "lm_head_bias": False,
        "moe_layers": [],
        "moe_num_experts": 4,
        "moe_aux_loss_coef": 0.01,
        "moe_expert_scale": False,
        "moe_ignore_padding": True,
    },
    "tokenizer_name": "tiny-bpe-512",
    "tokenizer_path": None,
    "tokenizer_hub_dir": None,
    "tokenizer_cache_dir": None,
    "max_seq_length": 64,
    "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "learning_rate": 1e-3,
    "weight_decay": 0.01,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "max_grad_norm": 1.0,
    "warmup_steps": 5,
    "max_steps": 60,
    "logging_steps": 5,
    "evaluation_strategy": "steps",
    "eval_steps": 0,
    "eval_max_batches": 4,
    "prediction_loss_only": True,
    "gather_predictions": False,
    "task_metrics": [],
    "save_steps": 0,
    "checkpoint_dir": None,
    "async_save": False,
    "emergency_checkpoint": False,
    "resume_from_checkpoint": None,
    "dataset_cache_dir": None,
    "dataloader_prefetch": 2,
    "seed": 42,
    "seed_per_rank": False,
    "bf16": True,
    "ddp_timeout": 60,
    "ddp_find_unused_parameters": False,
    "report_to": "none",
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="JSON file with training arguments")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config entry")
    return p.parse_args()


def _merge(base, upd):
    for k, v in upd.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v
    return base


def load_config(path, overrides):
    cfg = copy.deepcopy(DEFAULT_CONFIG)
    with open(path) as f:
        _merge(cfg, json.load(f))
    for item in overrides:
        key, _, value = item.partition("=")
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
        node = cfg
        parts = key.split(".")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value
    return cfg


def print_config(cfg):
    flat = {}
    for k, v in cfg.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                flat[f"{k}.{kk}"] = vv
        else:
            flat[k] = v
    width = max(len(k) for k in flat)
    lines = ["------------------------ training arguments ------------------------"]
    lines += [f"  {k}:{' ' * (width - len(k) + 1)}{v}" for k, v in sorted(flat.items())]
    lines.append("-------------------- end of training arguments --------------------")
    print("\n".join(lines), flush=True)


def check_config(cfg, world_size):
    if "evaluation_strategy" in cfg:
        warnings.warn(
            "`evaluation_strategy` is deprecated and will be removed in a future version. Use `eval_strategy` instead",
            FutureWarning,
        )
    if cfg["layout"] not in ("ddp", "pipeline"):
        raise ValueError(f"layout must be 'ddp' or 'pipeline', got {cfg['layout']!r}")
    if cfg["layout"] == "pipeline":
        if world_size != cfg["pipeline_stages"]:
            raise ValueError(
                f"layout=pipeline needs exactly {cfg['pipeline_stages']} processes, got world_size={world_size}"
            )
        if cfg["model"]["moe_layers"]:
            raise ValueError("MoE layers are not supported with layout=pipeline")
        if cfg["per_device_train_batch_size"] % cfg["pipeline_micro_batches"]:
            raise ValueError("per_device_train_batch_size must be divisible by pipeline_micro_batches")
        if cfg["max_grad_norm"]:
            warnings.warn("max_grad_norm is applied per pipeline stage, not to the global gradient norm", UserWarning)


def load_tokenizer(cfg, denv):
    if cfg["tokenizer_hub_dir"]:
        cache_dir = os.path.expandvars(cfg["tokenizer_cache_dir"] or "~/.cache/tokenizers")
        if denv.is_main:
            download_tokenizer(cfg["tokenizer_name"], cfg["tokenizer_hub_dir"], cache_dir)
        if dist.is_initialized():
            dist.barrier()
        path = os.path.join(cache_dir, cfg["tokenizer_name"])
    else:
        path = cfg["tokenizer_path"] or os.path.join(cfg["data_dir"], "tokenizer")
    tok = Tokenizer.from_pretrained(path)
    logger.info("Loaded tokenizer %s: %d tokens (%d added)", cfg["tokenizer_name"], len(tok), len(tok.added_tokens))
    return tok


def main():
    cli = parse_args()
    cfg = load_config(cli.config, cli.set)
    rank, world_size, local_rank, _ = env_ranks()
    setup_logging(rank, os.path.join(cfg["output_dir"], "logs"))
    if rank == 0:
        print_config(cfg)
    check_config(cfg, world_size)

    denv = init_distributed(cfg["ddp_timeout"])
    logger.info(
        "Process group ready: backend=%s, world_size=%d, rank=%d, device=%s",
        denv.backend, denv.world_size, denv.rank, denv.device,
    )
    seed = cfg["seed"] + (denv.rank if cfg["seed_per_rank"] else 0)
    set_seed(seed)

    tokenizer = load_tokenizer(cfg, denv)
    collator = SFTCollator(cfg["max_seq_length"], tokenizer.pad_token_id)

    if cfg["dataset_cache_dir"]:
        stats = build_or_wait_for_cache(cfg["dataset_cache_dir"], cfg["data_dir"], cfg["max_seq_length"], seed,
                                        denv.is_main)
        logger.info("Dataset: %s", stats)

    pipeline = cfg["layout"] == "pipeline"
    dp_rank, dp_world = (0, 1) if pipeline else (denv.rank, denv.world_size)
    train_prefixes = list_shards(cfg["data_dir"], "train")
    eval_prefixes = list_shards(cfg["data_dir"], "eval")
    my_shards = shards_for_rank(train_prefixes, dp_rank, dp_world)
    stream = PrefetchingShardStream(my_shards, cfg["per_device_train_batch_size"], collator,
                                    cfg["dataloader_prefetch"], rank=denv.rank)
    eval_prefix = eval_prefixes[dp_rank % len(eval_prefixes)] if eval_prefixes else None
    logger.info("Train shards for this rank: %s", [os.path.basename(p) for p in my_shards])

    mcfg = ModelConfig.from_dict(cfg["model"])
    if pipeline:
        model = build_stage(mcfg, denv.rank, cfg["pipeline_stages"], cfg["pipeline_split"]).to(denv.device)
        logger.info("Pipeline stage %d: layers %s, %.2fM parameters", denv.rank, list(model.layers.keys()),
                    count_parameters(model) / 1e6)
        engine = PipelineEngine(model, denv.rank, cfg["pipeline_stages"], denv.device,
                                cfg["pipeline_micro_batches"], cfg["bf16"])
        raw_model = model
    else:
        raw_model = build_model(mcfg).to(denv.device)
        logger.info("Model: %.2fM parameters", count_parameters(raw_model) / 1e6)
        model = raw_model
        if denv.world_size > 1:
            ignore = expert_parameter_names(raw_model)
            if ignore:
                logger.info("Excluding %d expert parameters from DDP gradient synchronisation", len(ignore))
                DDP._set_params_and_buffers_to_ignore_for_model(raw_model, ignore)
            model = DDP(
                raw_model,
                device_ids=[denv.device.index] if denv.device.type == "cuda" else None,
                find_unused_parameters=cfg["ddp_find_unused_parameters"],
            )
        engine = DataParallelEngine(model, raw_model, denv.device, cfg["gradient_accumulation_steps"], cfg["bf16"])

    optimizer = build_optimizer(raw_model, cfg)
    scheduler = build_scheduler(optimizer, cfg["warmup_steps"], cfg["max_steps"])

    callbacks = [ProgressCallback(denv.is_main), LossGuardCallback()]
    if cfg["task_metrics"]:
        callbacks.append(TaskMetricsCallback(cfg["task_metrics"]))
    if cfg["async_save"]:
        callbacks.append(AsyncCheckpointCallback(denv.is_main))
    if cfg["emergency_checkpoint"]:
        callbacks.append(EmergencyCheckpointCallback())

    docs_per_epoch = sum(shard_num_docs(p) for p in my_shards)
    trainer = Trainer(cfg, engine, optimizer, scheduler, stream, denv, callbacks, eval_prefix, collator,
                      docs_per_epoch)
    trainer.train()
    cleanup()


if __name__ == "__main__":
    main()
