#!/usr/bin/env python
"""Fine-tune / continue pretraining a small causal LM on local jsonl text with transformers.Trainer.

Usage:
  torchrun --nproc-per-node 2 train.py --model_config configs/llama_tiny.yaml --train_file data/train.jsonl ...
  torchrun --nproc-per-node 2 train.py run.json      # all arguments from a JSON/YAML file
"""
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import transformers
from transformers import HfArgumentParser, Trainer, TrainingArguments, set_seed

from textft.callbacks import EvalLossPrinter, ThroughputCallback
from textft.collate import CausalLMCollator
from textft.data import JsonlTextDataset
from textft.modeling import build_model
from textft.tok import load_tokenizer

logger = logging.getLogger("train")


@dataclass
class ModelArguments:
    model_config: str = field(metadata={"help": "YAML file with the model architecture"})
    tokenizer_dir: str = field(default="tokenizer")
    attn_implementation: Optional[str] = field(default=None)


@dataclass
class DataArguments:
    train_file: str = field(default="data/train.jsonl")
    validation_file: Optional[str] = field(default="data/valid.jsonl")
    max_seq_length: int = field(default=128, metadata={"help": "truncate to this many tokens; <=0 disables"})
    pad_to_multiple_of: Optional[int] = field(default=None)
    log_throughput: bool = field(default=False)


def main():
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        margs, dargs, targs = parser.parse_json_file(os.path.abspath(sys.argv[1]))
    elif len(sys.argv) == 2 and sys.argv[1].endswith((".yaml", ".yml")):
        margs, dargs, targs = parser.parse_yaml_file(os.path.abspath(sys.argv[1]))
    else:
        margs, dargs, targs = parser.parse_args_into_dataclasses()

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = targs.get_process_log_level()
    logger.setLevel(log_level)
    logging.getLogger("textft").setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    logger.warning(
        f"Process rank: {targs.process_index}, device: {targs.device}, n_gpu: {targs.n_gpu}, "
        f"distributed training: {targs.parallel_mode.value == 'distributed'}, world size: {targs.world_size}"
    )
    logger.info(f"Training/evaluation parameters {targs}")
    set_seed(targs.seed)

    tokenizer = load_tokenizer(margs.tokenizer_dir)
    with targs.main_process_first(desc="dataset loading and tokenization"):
        train_ds = JsonlTextDataset(dargs.train_file, tokenizer, dargs.max_seq_length)
        eval_ds = (
            JsonlTextDataset(dargs.validation_file, tokenizer, dargs.max_seq_length)
            if dargs.validation_file else None
        )
    model = build_model(margs.model_config, tokenizer, attn_implementation=margs.attn_implementation)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"model: {model.config.model_type}, {n_params / 1e6:.2f}M parameters")

    callbacks = [EvalLossPrinter()]
    if dargs.log_throughput:
        callbacks.append(ThroughputCallback())
    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=CausalLMCollator(tokenizer, pad_to_multiple_of=dargs.pad_to_multiple_of),
        processing_class=tokenizer,
        callbacks=callbacks,
    )
    result = trainer.train(resume_from_checkpoint=targs.resume_from_checkpoint)
    trainer.save_model()
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()
    if eval_ds is not None:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
