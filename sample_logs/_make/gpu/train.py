"""A small GPT-style trainer launched by torchrun (DDP over NCCL on GPUs, gloo on CPU).

Everything that varies between runs comes from the JSON file named by $TRAIN_CONFIG, which is
never printed: model size, data plan per rank and step, optional pieces (metrics writer, logger,
fused kernel, megatron-core parallel setup). The generator (run_all.sh) writes one such file per run.
"""

import ctypes
import io
import json
import logging
import math
import os
import queue
import signal
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP


def load_config():
    with open(os.environ.get("TRAIN_CONFIG", "config.json")) as f:
        return json.load(f)


class RunState:
    """Bookkeeping a resume script stores next to the weights (step, best loss)."""

    def __init__(self, step, best_loss):
        self.step, self.best_loss = step, best_loss


def plan_for(cfg, rank, step):
    """Per-rank, per-step overrides of the data plan (sequence length, shard size, padding ...)."""
    return cfg.get("plan", {}).get(str(rank), {}).get(str(step), {})


class Attention(nn.Module):
    def __init__(self, dim, heads, softcap=None):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.softcap = softcap
        self.view_heads = False  # a refactor that merges heads with .view() instead of .reshape()
        self.integer_mask = False  # a padding mask built from token ids (int64) handed to SDPA

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.integer_mask:
            mask = torch.ones(s, s, dtype=torch.int64, device=x.device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            return self.proj(out.transpose(1, 2).reshape(b, s, d))
        if self.view_heads:
            out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.heads), dim=-1) @ v
            return self.proj(out.transpose(1, 2).view(b, s, d))
        q = q * (1.0 / math.sqrt(d // self.heads))
        scores = q @ k.transpose(-2, -1)
        if self.softcap is not None:
            scores = fused_softcap(scores, self.softcap)
        attn = torch.softmax(scores, dim=-1)
        del scores
        out = (attn @ v).transpose(1, 2).reshape(b, s, d)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, dim, heads, softcap=None):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, softcap)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(
        self,
        vocab,
        dim,
        heads,
        layers,
        softcap=None,
        fused_embedding=False,
        unchecked_embedding=False,
        value_head=False,
    ):
        super().__init__()
        self.value_head = nn.Linear(dim, 1) if value_head else None  # an auxiliary head some steps skip
        self.skip_value_head = False
        self.hidden_dtype = None  # a mixed-precision path that casts activations but not the weights
        self.reentrant_checkpoint = False
        self.fused_embedding = fused_embedding
        self.unchecked_embedding = unchecked_embedding
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, softcap) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        if self.fused_embedding and tokens.is_cuda:
            x = FusedEmbedding.apply(tokens, self.embed.weight)
        elif self.unchecked_embedding and tokens.is_cuda:  # a gather without bounds checks
            x = torch.ops.aten._unsafe_index(self.embed.weight, [tokens])
        else:
            x = self.embed(tokens)
        if self.hidden_dtype is not None:
            x = x.to(self.hidden_dtype)
        for block in self.blocks:
            if self.reentrant_checkpoint and self.training:  # activation checkpointing, the old reentrant way
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=True)
            else:
                x = block(x)
        out = self.head(self.norm(x))
        if self.value_head is not None and not self.skip_value_head:
            out = out + 0.0 * self.value_head(x).mean()
        return out


try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs
    triton = None

if triton is not None:

    @triton.jit
    def _softcap_kernel(x_ptr, n, cap, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        val = tl.load(x_ptr + offs, mask=mask)
        e = tl.exp(2.0 * val / cap)
        tl.store(x_ptr + offs, cap * (e - 1.0) / (e + 1.0), mask=mask)

    @triton.jit
    def _embedding_kernel(ids_ptr, w_ptr, out_ptr, dim, BLOCK_D: tl.constexpr):
        row = tl.program_id(0)
        idx = tl.load(ids_ptr + row)
        cols = tl.arange(0, BLOCK_D)
        mask = cols < dim
        vals = tl.load(w_ptr + idx * dim + cols, mask=mask)
        tl.store(out_ptr + row * dim + cols, vals, mask=mask)


class FusedEmbedding(torch.autograd.Function):
    """Embedding lookup as one Triton kernel; backward scatters with index_add_."""

    @staticmethod
    def forward(ctx, ids, weight):
        flat = ids.reshape(-1).contiguous()
        out = torch.empty(flat.numel(), weight.size(1), device=weight.device, dtype=weight.dtype)
        _embedding_kernel[(flat.numel(),)](
            flat, weight, out, weight.size(1), BLOCK_D=triton.next_power_of_2(weight.size(1))
        )
        ctx.save_for_backward(flat)
        ctx.weight_shape = weight.shape
        return out.view(*ids.shape, weight.size(1))

    @staticmethod
    def backward(ctx, grad):
        (flat,) = ctx.saved_tensors
        grad_w = torch.zeros(ctx.weight_shape, device=grad.device, dtype=grad.dtype)
        grad_w.index_add_(0, flat, grad.reshape(-1, ctx.weight_shape[1]))
        return None, grad_w


def fused_softcap(x, cap):
    """In-place tanh soft-capping of attention logits with a Triton kernel (CPU: plain torch)."""
    if not x.is_cuda:
        return cap * torch.tanh(x / cap)
    x = x.contiguous()
    n = x.numel()
    block = 1024
    _softcap_kernel[(triton.cdiv(n, block),)](x, n, cap, BLOCK=block)
    return x


class MetricsWriter(threading.Thread):
    """Appends metrics to a JSON-lines file off the training thread."""

    def __init__(self, path):
        super().__init__(name="metrics-writer")
        self.path = path
        self.queue = queue.Queue()

    def run(self):
        with open(self.path, "a") as f:
            while True:
                item = self.queue.get()
                if item is None:
                    return
                f.write(json.dumps(item) + "\n")
                f.flush()

    def log(self, **item):
        self.queue.put(item)

    def close(self):
        self.queue.put(None)
        self.join()


def get_batch(cfg, rank, step, device):
    plan = plan_for(cfg, rank, step)
    stage = plan.get("wait_for")
    while stage and not os.path.exists(stage):
        time.sleep(0.5)
    if plan.get("preempt"):
        os.kill(os.getpid(), signal.SIGKILL)
    if plan.get("native_crash"):  # a native extension dereferencing NULL
        ctypes.string_at(0)
    if plan.get("shard_file"):  # token shards staged on local disk
        with open(plan["shard_file"], "rb") as f:
            f.read(16)
    mb = cfg["micro_batch"]
    seq = plan.get("seq_len", cfg["seq_len"])
    n_tokens = plan.get("shard_tokens", mb * seq)
    g = torch.Generator().manual_seed(1000 * rank + step)
    buf = torch.randint(0, cfg["vocab"], (n_tokens + 1,), generator=g)
    if plan.get("shard_dtype") == "uint16":  # shard written as uint16, read as int32
        raw = torch.randint(0, cfg["vocab"], (2 * (n_tokens + 1),), generator=g).to(torch.int16)
        buf = raw.view(torch.int32).to(torch.int64)
    tokens = buf[:-1].view(mb, seq)
    labels = buf[1:].view(mb, seq).clone()
    if plan.get("token_offset"):  # token ids from a shard written with a different tokenizer offset
        tokens = tokens + plan["token_offset"]
    pad = plan.get("pad", 0)
    if pad:
        labels[:, -pad:] = cfg.get("pad_id", -100)
    return tokens.to(device), labels.to(device)


class ShardSamples(torch.utils.data.Dataset):
    """Token windows read through a DataLoader worker; `bad_index` is a record that fails to decode."""

    def __init__(self, cfg, rank, bad_index=None, slow_index=None, huge_index=None):
        self.cfg, self.rank, self.bad_index, self.slow_index = cfg, rank, bad_index, slow_index
        self.huge_index = huge_index

    def __len__(self):
        return 10_000

    def __getitem__(self, index):
        if index == self.huge_index:  # a record whose length field is garbage: the reader allocates 1 TiB
            bytearray(2**40)
        if index == self.slow_index:  # a record on a network file system that stops answering
            time.sleep(3600)
        if index == self.bad_index:
            raise ValueError(
                f"record {index}: expected {self.cfg['seq_len'] + 1} tokens, found 0 (empty line in shard)"
            )
        g = torch.Generator().manual_seed(1000 * self.rank + index)
        return torch.randint(0, self.cfg["vocab"], (self.cfg["seq_len"] + 1,), generator=g)


def loss_scale_stats(logits):
    """Per-step statistics, compiled once with fullgraph=True where configured."""
    peak = logits.abs().max()
    if peak.item() > 1e4:  # a data-dependent branch: a graph break under torch.compile
        return peak * 0
    return peak


def learning_rate(cfg, rank, step):
    """Linear warm-up, then constant."""
    warmup = plan_for(cfg, rank, step).get("warmup_steps", cfg.get("warmup_steps", 2))
    return cfg.get("lr", 3e-4) * min(1.0, step / warmup)


def evaluate(model, cfg, rank, step, device):
    batches = plan_for(cfg, rank, step).get("val_batches", cfg.get("val_batches", 1))
    total = torch.zeros(1, device=device)
    model.eval()
    with torch.no_grad():
        for i in range(batches):
            tokens, labels = get_batch(cfg, rank, 10_000 + i, device)
            logits = model(tokens)
            total += F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        if batches:
            dist.all_reduce(total)
            total /= dist.get_world_size() * batches
    model.train()
    return total.item()


def setup_megatron(cfg):
    from megatron.core import parallel_state
    from megatron.core.transformer import TransformerConfig

    mp = cfg["megatron"]
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=mp["tensor_model_parallel_size"],
        pipeline_model_parallel_size=mp["pipeline_model_parallel_size"],
    )
    return TransformerConfig(
        num_layers=mp["num_layers"],
        hidden_size=mp["hidden_size"],
        num_attention_heads=mp["num_attention_heads"],
        tensor_model_parallel_size=mp["tensor_model_parallel_size"],
        pipeline_model_parallel_size=mp["pipeline_model_parallel_size"],
        bf16=True,
        pipeline_dtype=torch.bfloat16,
    )


@record
def main():
    cfg = load_config()
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        gpu = cfg.get("gpu_index", local_rank)
        torch.cuda.set_device(gpu)
        device = torch.device("cuda", gpu)
        hog_mib = cfg.get("hog_before_init_mib", {}).get(str(local_rank))
        if hog_mib is not None:  # another tenant holds the GPU when the process group starts
            free, _ = torch.cuda.mem_get_info(device)
            cfg["_hog"] = torch.empty(free - hog_mib * 2**20, dtype=torch.uint8, device=device)
        dist.init_process_group("nccl", timeout=timedelta(seconds=cfg.get("pg_timeout_s", 30)), device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timedelta(seconds=cfg.get("pg_timeout_s", 30)))
    rank, world = dist.get_rank(), dist.get_world_size()
    if cfg.get("global_batch"):  # the global batch is split into micro-batches over the data-parallel ranks
        gb, mb = cfg["global_batch"], cfg["micro_batch"]
        assert gb % (mb * world) == 0, (
            f"global batch size ({gb}) must be divisible by micro batch size ({mb}) times data-parallel size ({world})"
        )
    torch.manual_seed(cfg.get("seed", 1234))
    if cfg.get("detect_anomaly"):  # switched on while chasing a NaN
        torch.autograd.set_detect_anomaly(True)
    if cfg.get("tp_group"):  # a tensor-parallel group listed in a config written for more GPUs
        dist.new_group(cfg["tp_group"])
    if cfg.get("mesh_shape"):  # a 2-D (data x tensor) layout written for a bigger job
        from torch.distributed.device_mesh import init_device_mesh

        init_device_mesh(device.type, tuple(cfg["mesh_shape"]), mesh_dim_names=("dp", "tp"))

    if "megatron" in cfg:
        tcfg = setup_megatron(cfg)
        if rank == 0:
            print(f"model parallel setup done: {tcfg.num_layers} layers, hidden {tcfg.hidden_size}", flush=True)

    model = TinyGPT(
        cfg["vocab"],
        cfg["dim"],
        cfg["heads"],
        cfg["layers"],
        cfg.get("softcap"),
        cfg.get("fused_embedding", False),
        cfg.get("unchecked_embedding", False),
        cfg.get("value_head", False) or rank in cfg.get("value_head_ranks", []),
    ).to(device)
    if cfg.get("resume_from"):  # the run resumes from the checkpoint its config names
        model.load_state_dict(torch.load(cfg["resume_from"], map_location=device)["model"])
    for name, param in model.named_parameters():  # layers kept frozen while the rest fine-tunes
        if any(name.startswith(prefix) for prefix in cfg.get("frozen", [])):
            param.requires_grad_(False)
    if cfg.get("fsdp"):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        model = FSDP(model, device_id=device.index, use_orig_params=cfg.get("fsdp_orig_params", True))
    else:
        model.reentrant_checkpoint = cfg.get("reentrant_checkpoint", False)
        model = DDP(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=cfg.get("find_unused_parameters", False),
        )
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.get("lr", 3e-4))
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"world size {world}, {n_params / 1e6:.1f}M parameters, device {device.type}", flush=True)

    writer = None
    if cfg.get("metrics_file"):
        writer = MetricsWriter(cfg["metrics_file"].format(rank=rank))
        writer.start()
    if rank == 0 and cfg.get("logger") == "wandb":
        import wandb

        wandb.init(project=cfg.get("project", "tinygpt"), config=cfg)

    loader_iter = None
    loader_keys = ("loader_bad_index", "loader_slow_index", "loader_huge_index")
    if any(cfg.get(k) is not None for k in loader_keys):
        bad, slow, huge = ((cfg.get(k) or {}).get(str(rank)) for k in loader_keys)
        loader = torch.utils.data.DataLoader(
            ShardSamples(cfg, rank, bad, slow, huge),
            batch_size=cfg["micro_batch"],
            num_workers=2,
            timeout=cfg.get("loader_timeout_s", 0),
        )
        loader_iter = iter(loader)
    stats_fn = None
    # a gloo group for monitored_barrier, which NCCL does not implement
    barrier_group = dist.new_group(backend="gloo") if cfg.get("barrier_every") else None
    t0 = time.time()
    for step in range(1, cfg["steps"] + 1):
        if plan_for(cfg, rank, step).get("out_of_data"):  # this rank's shard list is shorter
            print(f"rank {rank}: no more shards after step {step - 1}, stopping", flush=True)
            return
        if barrier_group is not None and step % cfg["barrier_every"] == 0:
            dist.monitored_barrier(group=barrier_group, timeout=timedelta(seconds=cfg.get("barrier_timeout_s", 20)))
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, rank, step)
        if loader_iter is not None:
            window = next(loader_iter).to(device)
            tokens, labels = window[:, :-1], window[:, 1:]
        else:
            tokens, labels = get_batch(cfg, rank, step, device)
        if cfg.get("value_head"):  # this step's batch has no value targets on some rank
            model.module.skip_value_head = bool(plan_for(cfg, rank, step).get("skip_value_head"))
        if plan_for(cfg, rank, step).get("labels_on_cpu"):  # a new loss path forgets to move the labels
            labels = labels.cpu()
        for flag in ("view_heads", "integer_mask"):  # an attention code path switched on for this step
            if plan_for(cfg, rank, step).get(flag):
                for block in model.module.blocks:
                    setattr(block.attn, flag, True)
        if cfg.get("hidden_dtype_steps"):  # this rank's config switched on a bf16 activation path
            cast = plan_for(cfg, rank, step).get("hidden_bf16")
            model.module.hidden_dtype = torch.bfloat16 if cast else None
        if plan_for(cfg, rank, step).get("eval_mode_forward"):  # a validation helper left grad disabled
            with torch.no_grad():
                logits = model(tokens)
        else:
            logits = model(tokens)
        if plan_for(cfg, rank, step).get("logit_scale"):  # a temperature read as 0 from a bad config value
            logits = logits / plan_for(cfg, rank, step)["logit_scale_divisor"]
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))
        if plan_for(cfg, rank, step).get("compiled_stats"):
            stats_fn = stats_fn or torch.compile(loss_scale_stats, fullgraph=True, backend="aot_eager")
            stats_fn(logits.detach())
        loss.backward()
        step_plan = plan_for(cfg, rank, step)
        if step_plan.get("backward_again"):  # a second loss term backpropagated through the same graph
            loss.backward()
        if step_plan.get("save_optimizer"):
            torch.save(opt.state_dict(), step_plan["save_optimizer"])
        if step_plan.get("reload_optimizer"):  # resume into an optimizer built with weight-decay groups
            decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
            no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
            opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}])
            opt.load_state_dict(torch.load(step_plan["reload_optimizer"], map_location=device))
        if step_plan.get("staging_bytes"):  # a host staging buffer sized from a corrupt shard header
            staging = torch.empty(step_plan["staging_bytes"], dtype=torch.uint8)  # noqa: F841
        if step_plan.get("transposed_stats"):  # statistics reduced as a transposed (non-contiguous) view
            dist.all_reduce(torch.ones(4, 8, device=device).t())
        if step_plan.get("broadcast_from") is not None:  # a source rank taken from a config written for more GPUs
            dist.broadcast(torch.zeros(1, device=device), src=step_plan["broadcast_from"])
        if step_plan.get("uneven_splits"):  # an all-to-all whose split sizes do not add up to the tensor
            inp = torch.ones(4, device=device)
            dist.all_to_all_single(torch.empty(4, device=device), inp, input_split_sizes=[3, 3])
        if step_plan.get("graph_sync"):  # a CUDA graph captured around code that reads a value back to the host
            graph = torch.cuda.CUDAGraph()
            static = torch.ones(8, device=device)
            with torch.cuda.graph(graph):
                (static * 2).sum().item()
        if step_plan.get("flag_on_gpu0"):  # a flag built on cuda:0 instead of this rank's own GPU
            dist.all_reduce(torch.zeros(1, device="cuda:0"))
        if cfg.get("sync_flags"):  # ranks agree each step whether to stop early
            flag = torch.zeros(1) if step_plan.get("flag_on_cpu") else torch.zeros(1, device=device)
            dist.all_reduce(flag)
        if step_plan.get("leave_free_mib") is not None and device.type == "cuda":  # another tenant fills the GPU
            free, _ = torch.cuda.mem_get_info(device)
            hog = torch.empty(free - step_plan["leave_free_mib"] * 2**20, dtype=torch.uint8, device=device)  # noqa: F841
        if step_plan.get("reload"):  # re-read the weights another rank wrote
            model.module.load_state_dict(torch.load(step_plan["reload"], map_location=device))
        if step_plan.get("reload_onto"):  # weights loaded onto the device index a config names
            path, target = step_plan["reload_onto"]
            model.module.load_state_dict(torch.load(path, map_location=target))
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % cfg.get("eval_every", 10**9) == 0:
            val = evaluate(model, cfg, rank, step, device)
            if rank == 0:
                print(f"step {step} | val loss {val:.4f}", flush=True)
        gather_numel = plan_for(cfg, rank, step).get("gather_numel", cfg.get("gather_numel"))
        if gather_numel:  # per-rank token counts gathered for logging, one slot of 4 per rank
            counts = torch.ones(gather_numel, device=device)
            gathered = torch.empty(world * 4, device=device)
            dist.all_gather_into_tensor(gathered, counts)
        loss_value = loss.item()
        save_to = plan_for(cfg, rank, step).get("save_to")
        if save_to:
            torch.save({"step": step, "model": model.module.state_dict()}, save_to)
        dcp_dir = plan_for(cfg, rank, step).get("dcp_save")
        if dcp_dir:  # a distributed checkpoint (torch.distributed.checkpoint) written by every rank
            import torch.distributed.checkpoint as dcp

            dcp.save({"model": model.module.state_dict()}, checkpoint_id=dcp_dir)
        dcp_from = plan_for(cfg, rank, step).get("dcp_load_into_head")
        if dcp_from:  # resumed into a model that gained a value head since the checkpoint was written
            import torch.distributed.checkpoint as dcp

            grown = TinyGPT(cfg["vocab"], cfg["dim"], cfg["heads"], cfg["layers"], value_head=True).to(device)
            state = {"model": grown.state_dict()}
            dcp.load(state, checkpoint_id=dcp_from)
        state_to = plan_for(cfg, rank, step).get("save_with_state")
        if state_to:  # a resume file with the run's bookkeeping object pickled beside the weights
            torch.save({"model": model.module.state_dict(), "state": RunState(step, loss_value)}, state_to)
        resume_from = plan_for(cfg, rank, step).get("resume_now")
        if resume_from:  # resume with torch.load's defaults (weights_only=True since torch 2.6)
            model.module.load_state_dict(torch.load(resume_from, map_location=device)["model"])
        shard_to = plan_for(cfg, rank, step).get("save_optimizer_shard")
        if shard_to:  # each rank writes its own optimizer shard, as ZeRO-style checkpoints do
            blob = io.BytesIO()
            torch.save(opt.state_dict(), blob)
            data = blob.getvalue()
            if plan_for(cfg, rank, step).get("disk_full"):  # the file system fills up halfway through the write
                data = data[: len(data) // 2]
            with open(shard_to.format(rank=rank), "wb") as f:
                f.write(data)
        shard_from = plan_for(cfg, rank, step).get("resume_optimizer_shard")
        if shard_from:
            opt.load_state_dict(torch.load(shard_from.format(rank=rank), map_location=device))
        shrunk_to = plan_for(cfg, rank, step).get("save_shrunk_vocab")
        if shrunk_to:  # an export from a run whose tokenizer had 8 fewer tokens
            sd = {
                k: (v[:-8] if k in ("embed.weight", "head.weight") else v) for k, v in model.module.state_dict().items()
            }
            torch.save(sd, shrunk_to)
        weights_to = plan_for(cfg, rank, step).get("save_weights_without")
        if weights_to:  # an export that drops some tensors (an older layout of the model)
            path, dropped = weights_to
            torch.save({k: v for k, v in model.module.state_dict().items() if dropped not in k}, path)
        if writer is not None:
            writer.log(step=step, loss=loss_value)
        if rank == 0 and step % cfg.get("log_every", 1) == 0:
            print(f"step {step} | loss {loss_value:.4f} | {time.time() - t0:.1f}s", flush=True)
        time.sleep(cfg.get("step_sleep", 0))
        stage = plan_for(cfg, rank, step).get("wait_after")
        while stage and not os.path.exists(stage):  # e.g. an end-of-step upload that never finishes
            time.sleep(0.5)

    if writer is not None:
        writer.close()
    dist.barrier()
    if rank == 0:
        print("training done", flush=True)
    dist.destroy_process_group()


class _Tee:
    """Write to the console and to this rank's own file, as a script's per-rank log does."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self):
        for stream in self.streams:
            stream.flush()


def run_logged():
    """Start main(); with `log_failures` set, log any failure through logging first, as frameworks with their
    own logger do (the interpreter then prints the traceback again). With RANK_LOG_DIR set, the script also keeps
    its own per-rank file, <dir>/rank_<RANK>.log: its printed lines and, through logging, a failure's traceback."""
    rank_dir = os.environ.get("RANK_LOG_DIR")
    if rank_dir:
        os.makedirs(rank_dir, exist_ok=True)
        own = open(os.path.join(rank_dir, f"rank_{os.environ.get('RANK', '0')}.log"), "a", buffering=1)  # noqa: SIM115
        sys.stdout = _Tee(sys.stdout, own)
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO, stream=own)
    elif not load_config().get("log_failures"):
        main()
        return
    else:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        main()
    except Exception:
        logging.getLogger("tinygpt").exception("training failed on rank %s", os.environ.get("RANK"))
        raise


if __name__ == "__main__":
    run_logged()
