"""GRPO trainer: rollouts with a KV cache, rule + model rewards, group-normalised advantages, clipped PG + KL."""
from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from . import __version__
from .callbacks import (CheckpointCallback, EvalCallback, ProgressCallback, SampleTableCallback)
from .checkpoint import CheckpointManager
from .config import to_dict
from .data import LeftPadCollate, PromptShards, ShardAffineSampler
from .modeling import KVCache, RewardModel, build_policy
from .rewards import RewardStack

log = logging.getLogger("tinyrl.trainer")


class _RankFilter(logging.Filter):
    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def filter(self, record):
        record.rank = self.rank
        return True


def setup_logging(rank: int):
    h = logging.StreamHandler()
    h.setFormatter(logging.Formatter("[%(asctime)s.%(msecs)03d][%(name)s][%(levelname)s][r%(rank)d] %(message)s",
                                     datefmt="%H:%M:%S"))
    h.addFilter(_RankFilter(rank))
    root = logging.getLogger("tinyrl")
    root.handlers[:] = [h]
    root.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    root.propagate = False


def init_distributed(cfg, local_rank: int):
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=cfg.train.nccl_timeout_s))
    return device


def _fsdp_api():
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


class GRPOTrainer:
    def __init__(self, cfg, local_rank: int):
        self.cfg = cfg
        self.device = init_distributed(cfg, local_rank)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.local_rank = local_rank
        setup_logging(self.rank)
        if self.rank == 0:
            log.info("tinyrl %s | torch %s | world_size=%d | backend=%s", __version__, torch.__version__,
                     self.world, dist.get_backend())
            log.info("config:\n%s", json.dumps(to_dict(cfg), indent=2))
        torch.manual_seed(cfg.data.seed + self.rank)
        self.amp_dtype = None
        if cfg.train.amp == "bf16" or (cfg.train.amp == "auto" and self.device.type == "cuda"):
            self.amp_dtype = torch.bfloat16
        self._build_models()
        self._build_data()
        self.ckpt = CheckpointManager(cfg.train.output_dir)
        self.callbacks = [ProgressCallback(), SampleTableCallback(cfg.train.samples_every),
                          EvalCallback(cfg.train.eval_every), CheckpointCallback(cfg.train.save_every)]
        self.start_step = 0
        if cfg.train.resume:
            self._resume()

    # ------------------------------------------------------------------ build
    def _build_models(self):
        cfg = self.cfg
        policy = build_policy(cfg.model)
        if cfg.model.init_from:
            sd = torch.load(cfg.model.init_from, map_location="cpu", weights_only=True)
            policy.load_state_dict(sd.get("model", sd))
            log.info("loaded initial policy weights from %s", cfg.model.init_from)
        ref = copy.deepcopy(policy).eval().requires_grad_(False)
        if self.device.type == "cuda":
            self.ref_device = torch.device("cuda", self.local_rank + cfg.ref.device_offset)
        else:
            self.ref_device = self.device
        self.ref = ref.to(self.ref_device)
        log.info("reference model on %s", self.ref_device)
        if cfg.lora.enabled:
            policy.add_lora(cfg.lora.r, cfg.lora.alpha, cfg.lora.targets)
        n_train = sum(p.numel() for p in policy.parameters() if p.requires_grad)
        n_all = sum(p.numel() for p in policy.parameters())
        log.info("policy: %.2fM params, %.3fM trainable (lora r=%d)", n_all / 1e6, n_train / 1e6, cfg.lora.r)

        rm = None
        if "rm" in cfg.reward.kinds:
            rm = RewardModel(cfg.model.vocab_size, cfg.reward.hidden, max_seq_len=cfg.model.max_seq_len)
            if cfg.reward.rm_path:
                rm.load_state_dict(torch.load(cfg.reward.rm_path, map_location="cpu", weights_only=True))
            rm = rm.to(self.device).eval().requires_grad_(False)
        self.rewards = RewardStack(cfg.reward, rm, self.device)

        self.raw_policy = policy.to(self.device)
        layout = cfg.parallel.layout
        if layout == "ddp":
            self.policy = DDP(policy, device_ids=[self.local_rank] if self.device.type == "cuda" else None)
        elif layout == "fsdp2":
            self.policy = self._apply_fsdp2(policy)
        else:
            raise ValueError(f"unknown parallel.layout {layout!r}")
        if cfg.train.compile:
            self.policy = torch.compile(self.policy)
        params = [p for p in self.raw_policy.parameters() if p.requires_grad]
        o = cfg.optim
        self.optim = torch.optim.AdamW(params, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay,
                                       fused=o.fused, foreach=o.foreach)

    def _apply_fsdp2(self, policy):
        from torch.distributed.device_mesh import init_device_mesh
        fully_shard, MixedPrecisionPolicy = _fsdp_api()
        p = self.cfg.parallel
        tp = p.tp
        dp = p.dp_shard if p.dp_shard > 0 else self.world // tp
        mesh = init_device_mesh(self.device.type, (dp, tp), mesh_dim_names=("dp_shard", "tp"))
        if tp > 1:
            from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, parallelize_module)
            for blk in policy.blocks:
                parallelize_module(blk, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        mp = MixedPrecisionPolicy(param_dtype=self.amp_dtype or torch.float32, reduce_dtype=torch.float32)
        for blk in policy.blocks:
            fully_shard(blk, mesh=mesh["dp_shard"], mp_policy=mp)
        fully_shard(policy, mesh=mesh["dp_shard"], mp_policy=mp)
        return policy

    def _build_data(self):
        d = self.cfg.data
        self.dataset = PromptShards(d.path)
        self.sampler = ShardAffineSampler(self.dataset, self.rank, self.world, shuffle=False, seed=d.seed)
        self.loader = DataLoader(self.dataset, batch_size=self.cfg.rollout.prompts_per_rank, sampler=self.sampler,
                                 num_workers=d.num_workers, collate_fn=LeftPadCollate(d.pad_id, d.bos_id),
                                 drop_last=True, persistent_workers=d.num_workers > 0)
        self.eval_loader = DataLoader(self.dataset, batch_size=self.cfg.rollout.prompts_per_rank,
                                      sampler=self.sampler, num_workers=0,
                                      collate_fn=LeftPadCollate(d.pad_id, d.bos_id), drop_last=True)
        log.info("prompts: %d rows in %d shards, %d per rank, %d batches/epoch", len(self.dataset),
                 len(self.dataset.files), len(self.sampler), len(self.loader))

    # ------------------------------------------------------------------ helpers
    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _gen_model(self):
        return self.policy.module if isinstance(self.policy, DDP) else self.policy

    @torch.no_grad()
    def generate(self, ids, mask, greedy=False):
        ro, d = self.cfg.rollout, self.cfg.data
        model = self._gen_model()
        N, Tp = ids.shape
        m = self.cfg.model
        cache = KVCache(m.n_layers, N, m.n_heads, Tp + ro.max_new_tokens, m.d_model // m.n_heads,
                        self.amp_dtype or torch.float32, self.device)
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        finished = torch.zeros(N, dtype=torch.bool, device=self.device)
        out = []
        with self.autocast():
            logits = model(ids, attn_mask=mask, position_ids=pos, cache=cache)[:, -1].float()
            for t in range(ro.max_new_tokens):
                if greedy:
                    nxt = logits.argmax(-1)
                else:
                    logits = logits / ro.temperature
                    kth = logits.topk(ro.top_k, dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                    nxt = torch.multinomial(F.softmax(logits, -1), 1).squeeze(-1)
                nxt = torch.where(finished, torch.full_like(nxt, d.eos_id), nxt)
                out.append(nxt)
                finished |= nxt == d.eos_id
                if bool(finished.all()) or t == ro.max_new_tokens - 1:
                    break
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
                pos = pos[:, -1:] + 1
                logits = model(nxt[:, None], attn_mask=mask, position_ids=pos, cache=cache)[:, -1].float()
        comp = torch.stack(out, 1)
        # completion mask: tokens up to and including the first EOS
        is_eos = comp == d.eos_id
        cmask = (is_eos.cumsum(1) - is_eos.long()) == 0
        return comp, cmask

    def _logprobs(self, model, ids, mask, comp, device):
        full = torch.cat([ids, comp], 1).to(device)
        am = torch.cat([mask, torch.ones_like(comp)], 1).to(device)
        pos = (am.cumsum(1) - 1).clamp(min=0)
        with torch.autocast(device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            logits = model(full, attn_mask=am, position_ids=pos)
        Tp = ids.shape[1]
        logits = logits[:, Tp - 1:-1].float()
        return torch.gather(F.log_softmax(logits, -1), 2, comp.to(device)[..., None]).squeeze(-1)

    def score(self, records, ids, mask, comp, cmask):
        comps = [c[m].tolist() for c, m in zip(comp.cpu(), cmask.cpu())]
        r = self.rewards.rule_rewards(records, comps).to(self.device)
        if self.rewards.rm is not None:
            full = torch.cat([ids, comp], 1)
            fm = torch.cat([mask, cmask.long()], 1)
            with self.autocast(), torch.no_grad():
                if self.cfg.reward.share_backbone:
                    _, h = self._gen_model()(full, attn_mask=fm, position_ids=(fm.cumsum(1) - 1).clamp(min=0),
                                             return_hidden=True)
                    s = self.rewards.rm.score_hidden(h, fm)
                else:
                    s = self.rewards.rm(full.clamp(min=0), fm)
            r = r + self.cfg.reward.rm_weight * torch.tanh(s.float())
        return r, comps

    # ------------------------------------------------------------------ train
    def train(self):
        cfg = self.cfg
        G = cfg.rollout.num_generations
        for cb in self.callbacks:
            cb.on_train_begin(self)
        step = self.start_step
        epoch = 0
        log.info("starting GRPO: %d steps, %d prompts x %d generations per rank, grad_accum=%d",
                 cfg.train.max_steps, cfg.rollout.prompts_per_rank, G, cfg.train.grad_accum)
        while step < cfg.train.max_steps:
            self.sampler.set_epoch(epoch)
            for batch in self.loader:
                if step >= cfg.train.max_steps:
                    break
                t0 = time.time()
                ids = batch["input_ids"].to(self.device).repeat_interleave(G, 0)
                mask = batch["attention_mask"].to(self.device).repeat_interleave(G, 0)
                records = [r for r in batch["records"] for _ in range(G)]
                self.policy.eval()
                comp, cmask = self.generate(ids, mask)
                rewards, comps = self.score(records, ids, mask, comp, cmask)
                gathered = torch.empty(self.world * rewards.numel(), device=self.device)
                dist.all_gather_into_tensor(gathered, rewards.contiguous())
                grp = rewards.view(-1, G)
                adv = ((grp - grp.mean(1, keepdim=True)) / (grp.std(1, keepdim=True) + 1e-4)).view(-1)
                self.policy.train()
                loss_v, kl_v = self._update(ids, mask, comp, cmask, adv)
                step += 1
                stats = torch.tensor([loss_v, kl_v, cmask.sum(1).float().mean().item()], device=self.device)
                dist.all_reduce(stats)
                stats /= self.world
                metrics = {"loss": stats[0].item(), "reward": gathered.mean().item(),
                           "reward_std": gathered.std().item(), "kl": stats[1].item(),
                           "len": stats[2].item(), "s/step": time.time() - t0}
                out = {"records": batch["records"], "completions": comps, "rewards": rewards.tolist()}
                for cb in self.callbacks:
                    cb.on_step_end(self, step, metrics, out)
            epoch += 1
        for cb in self.callbacks:
            cb.on_train_end(self)
        log.info("training finished at step %d", step)

    def _update(self, ids, mask, comp, cmask, adv):
        cfg = self.cfg
        A = cfg.train.grad_accum
        N = ids.shape[0]
        mb = max(N // A, 1)
        with torch.no_grad():
            ref_lp = self._logprobs(self.ref, ids, mask, comp, self.ref_device).to(self.device)
        self.optim.zero_grad(set_to_none=True)
        tot_loss = tot_kl = 0.0
        chunks = list(range(0, N, mb))
        for j, s in enumerate(chunks):
            sl = slice(s, s + mb)
            sync = j == len(chunks) - 1
            ctx = self.policy.no_sync() if (isinstance(self.policy, DDP) and not sync) else contextlib.nullcontext()
            with ctx:
                lp = self._logprobs(self.policy, ids[sl], mask[sl], comp[sl], self.device)
                ratio = torch.exp(lp - lp.detach())
                a = adv[sl, None]
                pg = -torch.min(ratio * a, ratio.clamp(1 - cfg.train.clip_eps, 1 + cfg.train.clip_eps) * a)
                d = ref_lp[sl] - lp
                kl = torch.exp(d) - d - 1
                m = cmask[sl].float()
                loss = (((pg + cfg.train.kl_coef * kl) * m).sum(1) / m.sum(1).clamp(min=1)).mean() / len(chunks)
                loss.backward()
            tot_loss += loss.item()
            tot_kl += ((kl * m).sum() / m.sum().clamp(min=1)).item() / len(chunks)
        torch.nn.utils.clip_grad_norm_([p for p in self.raw_policy.parameters() if p.requires_grad],
                                       cfg.optim.grad_clip)
        self.optim.step()
        return tot_loss, tot_kl

    @torch.no_grad()
    def evaluate(self, n_batches: int = 1):
        self.policy.eval()
        vals = []
        for i, batch in enumerate(self.eval_loader):
            if i >= n_batches:
                break
            ids = batch["input_ids"].to(self.device)
            mask = batch["attention_mask"].to(self.device)
            comp, cmask = self.generate(ids, mask, greedy=True)
            r, _ = self.score(batch["records"], ids, mask, comp, cmask)
            vals.append(r.mean())
        t = torch.stack(vals).mean().reshape(1)
        dist.all_reduce(t)
        return (t / self.world).item()

    # ------------------------------------------------------------------ checkpoints
    def save(self, step: int):
        sd = {k: v.detach().cpu() for k, v in self.raw_policy.state_dict().items()}
        self.ckpt.save(step, sd, self.optim.state_dict(), {"step": step, "world_size": self.world})

    def _resume(self):
        path = self.ckpt.latest()
        if path is None:
            log.warning("train.resume set but no checkpoint found under %s; starting fresh", self.ckpt.root)
            return
        model_sd, optim_sd, state = self.ckpt.load(path)
        self.raw_policy.load_state_dict(model_sd)
        self.optim.load_state_dict(optim_sd)
        self.start_step = state["step"]
        log.info("resumed at step %d", self.start_step)
