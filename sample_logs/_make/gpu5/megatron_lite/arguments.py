"""Command line arguments (Megatron-LM style names)."""

import argparse
import os

import torch


def _add_network_size_args(parser):
    group = parser.add_argument_group(title="network size")
    group.add_argument("--num-layers", type=int, default=None)
    group.add_argument("--hidden-size", type=int, default=None)
    group.add_argument("--ffn-hidden-size", type=int, default=None,
                       help="Transformer feed-forward hidden size (default 4 * hidden).")
    group.add_argument("--num-attention-heads", type=int, default=None)
    group.add_argument("--max-position-embeddings", type=int, default=None)
    group.add_argument("--position-embedding-type", type=str, default="learned_absolute",
                       choices=["learned_absolute", "rope"])
    group.add_argument("--rotary-base", type=int, default=10000)
    group.add_argument("--make-vocab-size-divisible-by", type=int, default=128,
                       help="Pad the vocab size to be divisible by this value.")
    group.add_argument("--normalization", type=str, default="LayerNorm", choices=["LayerNorm"])
    group.add_argument("--layernorm-epsilon", type=float, default=1e-5)
    group.add_argument("--untie-embeddings-and-output-weights", action="store_true")
    group.add_argument("--init-method-std", type=float, default=0.02)
    group.add_argument("--hidden-dropout", type=float, default=0.0)
    group.add_argument("--attention-dropout", type=float, default=0.0)
    return parser


def _add_training_args(parser):
    group = parser.add_argument_group(title="training")
    group.add_argument("--micro-batch-size", type=int, default=None)
    group.add_argument("--global-batch-size", type=int, default=None)
    group.add_argument("--train-iters", type=int, default=None)
    group.add_argument("--exit-interval", type=int, default=None)
    group.add_argument("--clip-grad", type=float, default=1.0)
    group.add_argument("--weight-decay", type=float, default=0.01)
    group.add_argument("--adam-beta1", type=float, default=0.9)
    group.add_argument("--adam-beta2", type=float, default=0.999)
    group.add_argument("--adam-eps", type=float, default=1e-08)
    group.add_argument("--seed", type=int, default=1234)
    group.add_argument("--use-distributed-optimizer", action="store_true",
                       help="Shard optimizer state across data-parallel ranks.")
    group.add_argument("--distributed-optimizer-impl", type=str, default="buffer",
                       choices=["buffer", "zero"],
                       help="buffer: reduce-scatter of a contiguous grad buffer; "
                            "zero: torch ZeroRedundancyOptimizer (per-parameter partition).")
    group.add_argument("--ema-decay", type=float, default=None,
                       help="Keep an exponential moving average of the weights.")
    group.add_argument("--log-params-norm", action="store_true")
    group.add_argument("--heartbeat-timeout", type=int, default=900,
                       help="Seconds without training progress after which a rank "
                            "dumps its stacks and kills itself (0 disables).")
    return parser


def _add_learning_rate_args(parser):
    group = parser.add_argument_group(title="learning rate")
    group.add_argument("--lr", type=float, default=None)
    group.add_argument("--min-lr", type=float, default=0.0)
    group.add_argument("--lr-decay-style", type=str, default="cosine",
                       choices=["constant", "linear", "cosine"])
    group.add_argument("--lr-decay-iters", type=int, default=None)
    group.add_argument("--lr-warmup-iters", type=int, default=0)
    return parser


def _add_mixed_precision_args(parser):
    group = parser.add_argument_group(title="mixed precision")
    group.add_argument("--fp16", action="store_true")
    group.add_argument("--bf16", action="store_true")
    group.add_argument("--loss-scale", type=float, default=None,
                       help="Static loss scaling; if unset, dynamic loss scaling is used.")
    group.add_argument("--initial-loss-scale", type=float, default=2 ** 32)
    group.add_argument("--min-loss-scale", type=float, default=1.0)
    group.add_argument("--loss-scale-window", type=float, default=1000)
    group.add_argument("--hysteresis", type=int, default=2)
    return parser


def _add_distributed_args(parser):
    group = parser.add_argument_group(title="distributed")
    group.add_argument("--tensor-model-parallel-size", type=int, default=1)
    group.add_argument("--pipeline-model-parallel-size", type=int, default=1)
    group.add_argument("--parallel-layout", type=str, default="megatron",
                       choices=["megatron", "fsdp2"],
                       help="megatron: hand-written tensor parallelism + DP; "
                            "fsdp2: fully_shard over a 1-D device mesh.")
    group.add_argument("--tp-comm-overlap", action="store_true",
                       help="Keep row-parallel outputs in persistent communication buffers.")
    group.add_argument("--distributed-backend", default="nccl", choices=["nccl", "gloo"])
    group.add_argument("--distributed-timeout-minutes", type=int, default=10)
    group.add_argument("--gpus-per-node", type=int, default=8)
    group.add_argument("--local-rank", type=int, default=None)
    return parser


def _add_data_args(parser):
    group = parser.add_argument_group(title="data and dataloader")
    group.add_argument("--data-path", nargs="*", default=None,
                       help="Path(s) to the dataset prefix, optionally with weights: "
                            "`0.7 prefix_a 0.3 prefix_b`.")
    group.add_argument("--split", type=str, default="969,30,1")
    group.add_argument("--data-cache-path", default=None)
    group.add_argument("--seq-length", type=int, default=None)
    group.add_argument("--num-workers", type=int, default=2)
    group.add_argument("--tokenizer-type", type=str, default="NullTokenizer",
                       choices=["NullTokenizer", "GPT2BPETokenizer"])
    group.add_argument("--vocab-size", type=int, default=None)
    group.add_argument("--vocab-file", type=str, default=None)
    group.add_argument("--merge-file", type=str, default=None)
    return parser


def _add_checkpointing_args(parser):
    group = parser.add_argument_group(title="checkpointing")
    group.add_argument("--save", type=str, default=None)
    group.add_argument("--save-interval", type=int, default=None)
    group.add_argument("--load", type=str, default=None)
    group.add_argument("--no-load-optim", action="store_true")
    group.add_argument("--no-load-rng", action="store_true")
    return parser


def _add_logging_args(parser):
    group = parser.add_argument_group(title="logging")
    group.add_argument("--log-interval", type=int, default=100)
    group.add_argument("--eval-interval", type=int, default=1000)
    group.add_argument("--eval-iters", type=int, default=0)
    group.add_argument("--timing-log-level", type=int, default=0, choices=[0, 1, 2])
    group.add_argument("--log-memory", action="store_true")
    group.add_argument("--train-log-dir", type=str, default=None,
                       help="Also write every rank's console output to <dir>/rank<N>.log.")
    return parser


def parse_args():
    parser = argparse.ArgumentParser(description="Megatron-Lite GPT pretraining",
                                     allow_abbrev=False)
    for fn in (_add_network_size_args, _add_training_args, _add_learning_rate_args,
               _add_mixed_precision_args, _add_distributed_args, _add_data_args,
               _add_checkpointing_args, _add_logging_args):
        parser = fn(parser)
    args = parser.parse_args()

    # distributed env set by torchrun
    args.rank = int(os.getenv("RANK", "0"))
    args.world_size = int(os.getenv("WORLD_SIZE", "1"))
    return args


def validate_args(args):
    """Checks and derived values, in the spirit of megatron/training/arguments.py."""
    tp = args.tensor_model_parallel_size
    pp = args.pipeline_model_parallel_size
    if args.parallel_layout == "fsdp2":
        assert tp == 1, "the fsdp2 layout does not combine with tensor parallelism yet"
    assert pp == 1, "pipeline parallelism is not supported by this code base"
    assert args.world_size % (tp * pp) == 0, \
        "world size ({}) is not divisible by tensor model parallel size ({}) times " \
        "pipeline model parallel size ({})".format(args.world_size, tp, pp)
    args.data_parallel_size = args.world_size // (tp * pp)
    if args.parallel_layout == "fsdp2":
        args.data_parallel_shard_degree = args.world_size

    if args.rank == 0:
        print("using world size: {}, data-parallel size: {}, context-parallel size: 1, "
              "tensor-model-parallel size: {}, pipeline-model-parallel size: {} ".format(
                  args.world_size, args.data_parallel_size, tp, pp), flush=True)

    for name in ("num_layers", "hidden_size", "num_attention_heads", "seq_length",
                 "micro_batch_size", "train_iters", "lr"):
        assert getattr(args, name) is not None, "--{} is required".format(name.replace("_", "-"))

    if args.global_batch_size is None:
        args.global_batch_size = args.micro_batch_size * args.data_parallel_size
        if args.rank == 0:
            print("setting global batch size to {}".format(args.global_batch_size), flush=True)
    assert args.global_batch_size % (args.micro_batch_size * args.data_parallel_size) == 0, \
        "global batch size ({}) is not divisible by micro batch size ({}) times data " \
        "parallel size ({})".format(args.global_batch_size, args.micro_batch_size,
                                    args.data_parallel_size)

    assert not (args.fp16 and args.bf16), "cannot use both --fp16 and --bf16"
    args.params_dtype = torch.float
    if args.fp16:
        args.params_dtype = torch.half
    if args.rank == 0:
        print("using {} for parameters ...".format(args.params_dtype), flush=True)

    assert args.hidden_size % args.num_attention_heads == 0
    assert args.num_attention_heads % tp == 0, \
        "num_attention_heads ({}) must be divisible by tensor model parallel size ({})".format(
            args.num_attention_heads, tp)
    if args.ffn_hidden_size is None:
        args.ffn_hidden_size = 4 * args.hidden_size
    args.kv_channels = args.hidden_size // args.num_attention_heads

    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length
    if args.position_embedding_type == "learned_absolute":
        assert args.max_position_embeddings >= args.seq_length

    if args.lr_decay_iters is None:
        args.lr_decay_iters = args.train_iters
    if args.save is not None and args.save_interval is None:
        args.save_interval = args.train_iters
    assert args.data_path, "--data-path is required"
    if args.tokenizer_type == "NullTokenizer":
        assert args.vocab_size is not None, "NullTokenizer requires --vocab-size"
    return args


def print_args(args):
    """Megatron style argument dump (rank 0 only)."""
    if args.rank != 0:
        return
    print("------------------------ arguments ------------------------", flush=True)
    str_list = []
    for arg in vars(args):
        dots = "." * (48 - len(arg))
        str_list.append("  {} {} {}".format(arg, dots, getattr(args, arg)))
    for line in sorted(str_list, key=lambda x: x.lower()):
        print(line, flush=True)
    print("-------------------- end of arguments ---------------------", flush=True)
