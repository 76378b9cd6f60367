"""The per-worker training function run by ray.train.torch.TorchTrainer."""
import logging
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import ray.train
import ray.train.torch
from ray.train import Checkpoint

from .data import shard_loader, val_loader
from .logutil import setup_logging
from .model import SensorTransformer

log = logging.getLogger("seqcls.train")


def _build_metrics(names, n_classes):
    metrics = {}
    for name in names:
        if name == "accuracy":
            metrics[name] = None  # computed inline
        elif name == "macro_f1":
            from torchmetrics.classification import MulticlassF1Score
            metrics[name] = MulticlassF1Score(num_classes=n_classes, average="macro")
        else:
            raise ValueError(f"unknown metric {name!r}")
    return metrics


def _restore(model, optimizer, ckpt, rank):
    with ckpt.as_directory() as d:
        state = torch.load(os.path.join(d, "model.pt"), map_location="cpu")
        model.load_state_dict(state["model"])
        opt_state = torch.load(os.path.join(d, f"optim-rank{rank:02d}.pt"), map_location="cpu")
        optimizer.load_state_dict(opt_state)
        return state["epoch"] + 1, state.get("best_val", float("inf"))


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        total += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        n += len(y)
    model.train()
    return total / max(n, 1), correct / max(n, 1)


def train_func(cfg: dict):
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    setup_logging(rank, cfg.get("log_level", "INFO"))
    torch.manual_seed(cfg["seed"])
    torch.set_num_threads(cfg.get("torch_threads", 1))
    log.info("worker up: world_size=%d local_rank=%d pid=%d backend=%s",
             world, ctx.get_local_rank(), os.getpid(), dist.get_backend())

    m, o, t = cfg["model"], cfg["optim"], cfg["train"]
    metrics = _build_metrics(t.get("metrics", ["accuracy"]), m["n_classes"])

    if cfg["data"].get("source", "npz") == "ray":
        train_iter = None
        shard = ray.train.get_dataset_shard("train")
    else:
        train_iter = shard_loader(cfg, rank, world)
    val = val_loader(cfg, rank, world)

    model = SensorTransformer(m["n_features"], m["n_classes"], m["d_model"], m["n_heads"],
                              m["n_layers"], m["dim_ff"], m["max_len"], m["dropout"])
    model = ray.train.torch.prepare_model(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=o["lr"], weight_decay=o["weight_decay"],
                                  betas=tuple(o["betas"]))

    start_epoch, best_val, bad_epochs = 0, float("inf"), 0
    ckpt = ray.train.get_checkpoint()
    if ckpt is None and cfg.get("resume_from"):
        ckpt = Checkpoint(cfg["resume_from"])
    if ckpt is not None:
        log.info("restoring from %s", ckpt.path)
        start_epoch, best_val = _restore(model.module if hasattr(model, "module") else model, optimizer, ckpt, rank)
        log.info("resumed at epoch %d (best val_loss %.4f)", start_epoch, best_val)

    es = t.get("early_stopping", {})
    step = 0
    for epoch in range(start_epoch, t["epochs"]):
        t0 = time.time()
        if train_iter is not None:
            batches = train_iter
        else:
            batches = ((torch.as_tensor(b["x"]).view(-1, t["seq_len"], m["n_features"]), torch.as_tensor(b["y"]))
                       for b in shard.iter_torch_batches(batch_size=cfg["data"]["batch_size"], drop_last=True))
        run_loss, nb = 0.0, 0
        for x, y in batches:
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=o.get("label_smoothing", 0.0))
            assert torch.isfinite(loss), f"loss is {loss.item()} at step {step} (epoch {epoch})"
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), o["grad_clip"])
            optimizer.step()
            run_loss += loss.item()
            nb += 1
            step += 1
            if step % t["log_every"] == 0:
                log.info("epoch %d step %d loss %.4f", epoch, step, run_loss / nb)
            if t.get("step_sleep"):
                time.sleep(t["step_sleep"])

        val_loss, val_acc = evaluate(model, val)
        log.info("epoch %d done in %.1fs: train_loss %.4f val_loss %.4f val_acc %.3f",
                 epoch, time.time() - t0, run_loss / max(nb, 1), val_loss, val_acc)

        improved = val_loss < best_val - es.get("min_delta", 0.0)
        best_val = min(best_val, val_loss)
        bad_epochs = 0 if improved else bad_epochs + 1

        with tempfile.TemporaryDirectory() as tmp:
            if rank == 0:
                torch.save({"model": model.module.state_dict() if hasattr(model, "module") else model.state_dict(),
                            "epoch": epoch, "best_val": best_val, "config": cfg}, os.path.join(tmp, "model.pt"))
            torch.save(optimizer.state_dict(), os.path.join(tmp, f"optim-rank{rank:02d}.pt"))
            ray.train.report({"epoch": epoch, "train_loss": run_loss / max(nb, 1), "val_loss": val_loss,
                              "val_acc": val_acc}, checkpoint=Checkpoint.from_directory(tmp))

        if es.get("patience") and bad_epochs >= es["patience"]:
            log.info("early stopping at epoch %d (best val_loss %.4f)", epoch, best_val)
            break
    log.info("training finished after %d steps", step)
