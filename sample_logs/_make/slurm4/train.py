#!/usr/bin/env python
"""Train a tiny keyword-spotting conformer (or a CIFAR-style ResNet) with DDP on gloo.

    python train.py --config configs/kws_conformer.yaml optim.lr=5e-4 train.max_epochs=3

Launch with torchrun (env:// from the agent) or directly from srun, one task per rank
(rank/world from SLURM_PROCID/SLURM_NTASKS, MASTER_ADDR/MASTER_PORT from the batch script).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from kws import __version__, checkpoint, distenv
from kws.config import apply_overrides, load_config
from kws.data import ShardDataset, infinite, list_shards, make_loader
from kws.models import build_model

log = logging.getLogger("kws.train")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="experiment YAML")
    p.add_argument("overrides", nargs="*", help="Hydra-style key=value overrides")
    return p.parse_args(argv)


class Trainer:
    def __init__(self, cfg, denv):
        self.cfg, self.denv = cfg, denv
        self.stop_requested = False
        self.global_step, self.epoch = 0, 0
        self.best_acc = 0.0

        torch.manual_seed(cfg.seed)
        model = build_model(cfg)
        nparams = sum(p.numel() for p in model.parameters())
        log.info("model %s: %.2fM parameters", cfg.model.arch, nparams / 1e6)
        self.model = model
        self.net = DDP(model) if denv.world_size > 1 else model
        self.opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        total = cfg.train.max_epochs * cfg.train.steps_per_epoch
        warm = cfg.optim.warmup_steps

        def lr_lambda(step):
            if step < warm:
                return (step + 1) / max(1, warm)
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm))))

        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda)
        self.ema = None
        if cfg.train.ema_decay:
            self.ema = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.ckpt_dir = cfg.ckpt.dir
        self._maybe_resume()
        self._build_data()
        signal.signal(signal.SIGUSR1, self._on_usr1)

    # ------------------------------------------------------------------ setup
    def _build_data(self):
        cfg, d = self.cfg, self.denv
        seed = cfg.seed * 1000 + d.rank
        if cfg.data.get("source", "shards") == "remote":
            from kws.remote import RemoteBatches

            addr = os.environ.get("KWS_DATA_SERVER", cfg.data.server)
            self.train_iter = iter(RemoteBatches(addr, cfg.data.authkey, d.rank, cfg.data.batch_size))
        else:
            shards = list_shards(cfg.data.root, "train")[d.rank :: d.world_size]
            log.info("train shards: %s", ", ".join(os.path.basename(s) for s in shards))
            ds = ShardDataset(shards, cfg.data.task, train=True, crop_frames=cfg.data.crop_frames,
                              cache=cfg.data.cache, frontend=cfg.data.frontend)
            log.info("train set: %d examples on this rank", len(ds))
            self.train_iter = infinite(make_loader(ds, cfg.data, train=True, seed=seed))
        val_shards = list_shards(cfg.data.root, "val")
        if cfg.val.mode == "distributed":
            val_shards = val_shards[d.rank :: d.world_size]
        if cfg.val.mode == "distributed" or d.is_main:
            self.val_ds = ShardDataset(val_shards, cfg.data.task, train=False, frontend=cfg.data.frontend)
            self.val_loader = make_loader(self.val_ds, cfg.data, train=False, seed=seed)
        else:
            self.val_ds = self.val_loader = None

    def _maybe_resume(self):
        path = os.path.join(self.ckpt_dir, "last.pt")
        if self.cfg.ckpt.resume and os.path.exists(path):
            state = checkpoint.load(path)
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optim"])
            self.sched.load_state_dict(state["sched"])
            self.epoch, self.global_step = state["epoch"] + 1, state["step"]
            log.info("resumed from %s (epoch %d, step %d)", path, state["epoch"], state["step"])

    def _on_usr1(self, signum, frame):
        self.stop_requested = True
        log.warning("caught signal %d: will write a preemption checkpoint after the current step", signum)

    # ------------------------------------------------------------------ loop
    def fit(self):
        cfg = self.cfg
        log.info("starting training: %d epochs x %d steps, world size %d",
                 cfg.train.max_epochs, cfg.train.steps_per_epoch, self.denv.world_size)
        while self.epoch < cfg.train.max_epochs:
            epoch_start = time.time()
            self.train_epoch()
            if self.stop_requested:
                return self._preempt_exit()
            metrics = self.validate()
            self.save(metrics, since=epoch_start)
            self.epoch += 1
        log.info("training finished at step %d, best val acc %.4f", self.global_step, self.best_acc)

    def train_epoch(self):
        cfg, d = self.cfg, self.denv
        self.net.train()
        t0, seen = time.time(), 0
        for _ in range(cfg.train.steps_per_epoch):
            feats, lens, labels = next(self.train_iter)
            logits = self.net(feats, lens)
            loss = F.cross_entropy(logits, labels, label_smoothing=cfg.optim.label_smoothing)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.optim.clip_norm)
            self.opt.step()
            self.sched.step()
            if self.ema is not None:
                self._update_ema(cfg.train.ema_decay)
            self.global_step += 1
            seen += labels.numel()
            if d.is_main and self.global_step % cfg.train.log_every == 0:
                el = time.time() - t0
                log.info("epoch %d step %d loss %.4f gnorm %.3f lr %.2e %.1f ex/s",
                         self.epoch, self.global_step, loss.item(), float(gnorm),
                         self.sched.get_last_lr()[0], seen / max(el, 1e-6))
            if self.stop_requested:
                return
            if cfg.val.every_steps and self.global_step % cfg.val.every_steps == 0:
                self.validate()
                self.net.train()

    @torch.no_grad()
    def _update_ema(self, decay):
        for k, v in self.model.state_dict().items():
            if v.dtype.is_floating_point:
                self.ema[k].mul_(decay).add_(v, alpha=1 - decay)
            else:
                self.ema[k].copy_(v)

    @torch.no_grad()
    def validate(self):
        cfg, d = self.cfg, self.denv
        if self.val_loader is None:  # rank0-only validation, nothing to do here
            return None
        self.net.eval()
        model = self.model
        t0 = time.time()
        tot = torch.zeros(3, dtype=torch.float64)  # loss_sum, correct, count
        nb = len(self.val_loader)
        tta = cfg.val.get("tta", 1) if cfg.data.task == "image" else 1
        for i, (feats, lens, labels) in enumerate(self.val_loader):
            if tta > 1:  # average logits over flipped / shifted views
                views = [feats, feats.flip(-1), feats.roll(2, -1), feats.roll(-2, -1),
                         feats.roll(2, -2), feats.roll(-2, -2), feats.flip(-1).roll(2, -1), feats.flip(-1).roll(-2, -1)]
                logits = torch.stack([model(v, lens) for v in views[:tta]]).mean(0)
            else:
                logits = model(feats, lens)
            tot[0] += F.cross_entropy(logits, labels, reduction="sum").item()
            tot[1] += (logits.argmax(-1) == labels).sum().item()
            tot[2] += labels.numel()
            if cfg.val.log_every and (i + 1) % cfg.val.log_every == 0:
                log.info("validation %d/%d batches", i + 1, nb)
        if cfg.val.mode == "distributed" and d.world_size > 1:
            dist.all_reduce(tot)
        loss, acc = tot[0].item() / tot[2].item(), tot[1].item() / tot[2].item()
        if d.is_main:
            log.info("epoch %d step %d val_loss %.4f val_acc %.4f (%d examples, %.1fs)",
                     self.epoch, self.global_step, loss, acc, int(tot[2].item()), time.time() - t0)
        self.best_acc = max(self.best_acc, acc)
        return {"val_loss": loss, "val_acc": acc}

    # ------------------------------------------------------------------ checkpoints
    def _state(self, metrics):
        return {
            "model": self.model.state_dict(),
            "optim": self.opt.state_dict(),
            "sched": self.sched.state_dict(),
            "ema": self.ema,
            "epoch": self.epoch,
            "step": self.global_step,
            "metrics": metrics or {},
            "world_size": self.denv.world_size,
        }

    def save(self, metrics, since):
        cfg, d = self.cfg, self.denv
        path = os.path.join(self.ckpt_dir, "last.pt")
        if d.is_main:
            checkpoint.save(self._state(metrics), path, atomic=cfg.ckpt.atomic)
        if cfg.ckpt.get("node_cache_dir") and d.is_node_leader and d.node_rank > 0:
            # follower nodes keep a local copy so that a restart does not hit the shared FS
            st = checkpoint.wait_for_update(path, newer_than=since)
            state = checkpoint.load(path)
            local = os.path.join(cfg.ckpt.node_cache_dir, f"node{d.node_rank}", "last.pt")
            os.makedirs(os.path.dirname(local), exist_ok=True)
            torch.save({"model": state["model"], "epoch": state["epoch"]}, local)
            log.info("node cache updated from %s (%d bytes)", path, st.st_size)
        if cfg.ckpt.barrier:
            distenv.barrier()

    def _preempt_exit(self):
        if self.denv.is_main:
            checkpoint.save(self._state(None), os.path.join(self.ckpt_dir, "preempt.pt"), atomic=True)
        distenv.barrier()
        log.warning("exiting after preemption checkpoint at step %d", self.global_step)
        return 0


@record
def main(argv=None):
    args = parse_args(argv)
    denv = distenv.detect()
    distenv.setup_logging(denv)
    cfg = load_config(args.config)
    apply_overrides(cfg, args.overrides)
    log.info("kws %s torch %s python %s pid %d launcher=%s", __version__, torch.__version__,
             sys.version.split()[0], os.getpid(), denv.launcher)
    log.info("config %s overrides %s", args.config, " ".join(args.overrides) or "-")
    threads = int(os.environ.get("OMP_NUM_THREADS", cfg.runtime.threads))
    torch.set_num_threads(threads)
    distenv.init(denv, cfg.dist.timeout_s, backend=cfg.dist.backend)
    trainer = Trainer(cfg, denv)
    rc = trainer.fit()
    distenv.cleanup()
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
