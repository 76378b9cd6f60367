"""A small Trainer: data-parallel or two-stage pipeline engine, gradient
accumulation, evaluation, checkpoints and callbacks."""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F

import p2p_communication as p2p
from data import TASKS, eval_batches
from dist_utils import logger
from trainer_utils import (
    CallbackHandler,
    TrainerControl,
    TrainerState,
    restore_rng_state,
    rng_state,
)


def _to_device(batch, device):
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _autocast(device, enabled):
    if enabled and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def build_optimizer(model, args):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or name.endswith(".bias") else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": args["weight_decay"]},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=args["learning_rate"], betas=(args["adam_beta1"], args["adam_beta2"]))


def build_scheduler(optimizer, warmup_steps, max_steps):
    def lr_lambda(step):
        if step < warmup_steps:
            return (step + 1) / max(warmup_steps, 1)
        progress = (step - warmup_steps) / max(max_steps - warmup_steps, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


# --------------------------------------------------------------------------- checkpoint formats
def save_checkpoint_dir(ckpt_dir, model_state, optim_state, sched_state, state, rank, world_size, is_main):
    """HF-style checkpoint directory (data-parallel layout)."""
    os.makedirs(ckpt_dir, exist_ok=True)
    if is_main:
        torch.save(model_state, os.path.join(ckpt_dir, "model.pt"))
        torch.save(optim_state, os.path.join(ckpt_dir, "optimizer.pt"))
        torch.save(sched_state, os.path.join(ckpt_dir, "scheduler.pt"))
        state.save_to_json(os.path.join(ckpt_dir, "trainer_state.json"))
    rng_file = "rng_state.pth" if world_size <= 1 else f"rng_state_{rank}.pth"
    torch.save(rng_state(), os.path.join(ckpt_dir, rng_file))


def save_pipeline_checkpoint(root, iteration, stage, model_state, optim_state, sched_state, args):
    """Megatron-style: one file per pipeline rank plus a tracker file."""
    d = os.path.join(root, f"iter_{iteration:07d}", f"mp_rank_00_{stage:03d}")
    os.makedirs(d, exist_ok=True)
    torch.save(
        {
            "iteration": iteration,
            "checkpoint_version": 3.0,
            "args": dict(args),
            "model": model_state,
            "optimizer": optim_state,
            "opt_param_scheduler": sched_state,
            "rng_state": rng_state(),
        },
        os.path.join(d, "model_optim_rng.pt"),
    )
    if stage == 0:
        with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(iteration))


# --------------------------------------------------------------------------- engines
class DataParallelEngine:
    def __init__(self, model, raw_model, device, accum_steps, bf16):
        self.model = model
        self.raw_model = raw_model
        self.device = device
        self.accum_steps = accum_steps
        self.bf16 = bf16
        self.is_ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)

    def train_step(self, data_iter):
        self.model.train()
        total = torch.zeros((), device=self.device)
        for micro in range(self.accum_steps):
            batch = _to_device(next(data_iter), self.device)
            sync = (not self.is_ddp) or micro == self.accum_steps - 1
            ctx = contextlib.nullcontext() if sync else self.model.no_sync()
            with ctx:
                with _autocast(self.device, self.bf16):
                    loss, _ = self.model(batch["input_ids"], batch["attention_mask"], batch["labels"])
                (loss / self.accum_steps).backward()
            total += loss.detach()
        return total / self.accum_steps

    def clip_grad(self, max_norm):
        return torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), max_norm)


class PipelineEngine:
    """All-forward-all-backward (GPipe) schedule over two stages."""

    def __init__(self, stage_model, stage, num_stages, device, micro_batches, bf16):
        self.model = stage_model
        self.raw_model = stage_model
        self.stage = stage
        self.num_stages = num_stages
        self.device = device
        self.micro_batches = micro_batches
        self.bf16 = bf16
        self.act_dtype = torch.float32

    @property
    def is_first(self):
        return self.stage == 0

    @property
    def is_last(self):
        return self.stage == self.num_stages - 1

    def train_step(self, data_iter):
        self.model.train()
        batch = _to_device(next(data_iter), self.device)
        keys = list(batch.keys())
        micro = [
            dict(zip(keys, parts))
            for parts in zip(*(batch[k].chunk(self.micro_batches, dim=0) for k in keys))
        ]
        loss = torch.zeros((), device=self.device)
        if self.is_first:
            outputs = []
            for mb in micro:
                with _autocast(self.device, self.bf16):
                    out = self.model(mb["input_ids"], mb["attention_mask"])
                p2p.send_forward(out, self.device)
                outputs.append(out)
            for out in outputs:
                grad = p2p.recv_backward(self.act_dtype, self.device)
                torch.autograd.backward(out, grad_tensors=grad)
        else:
            inputs, losses = [], []
            for mb in micro:
                x = p2p.recv_forward(self.act_dtype, self.device)
                with _autocast(self.device, self.bf16):
                    mb_loss, _ = self.model(x, mb["attention_mask"], mb["labels"])
                inputs.append(x)
                losses.append(mb_loss)
            for x, mb_loss in zip(inputs, losses):
                (mb_loss / len(micro)).backward()
                p2p.send_backward(x.grad, self.device)
            loss = torch.stack([l.detach() for l in losses]).mean()
        dist.broadcast(loss, src=self.num_stages - 1)
        return loss

    def clip_grad(self, max_norm):
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)


# --------------------------------------------------------------------------- trainer
class Trainer:
    def __init__(self, args, engine, optimizer, scheduler, train_stream, denv, callbacks=(), eval_prefix=None,
                 collator=None, docs_per_epoch=None):
        self.args = args
        self.engine = engine
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.train_stream = train_stream
        self.denv = denv
        self.eval_prefix = eval_prefix
        self.collator = collator
        self.docs_per_epoch = docs_per_epoch
        self.is_pipeline = isinstance(engine, PipelineEngine)
        self.state = TrainerState(max_steps=args["max_steps"])
        self.control = TrainerControl()
        self.checkpoint_dir = args.get("checkpoint_dir") or os.path.join(args["output_dir"], "checkpoints")
        self.callback_handler = CallbackHandler(callbacks, self)
        self._tr_loss = torch.zeros((), device=denv.device)
        self._logged_step = 0
        self.callback_handler.on_init_end(args, self.state, self.control)

    @property
    def unwrapped_model(self):
        return self.engine.raw_model

    # ------------------------------------------------------------------ checkpoints
    def _save_checkpoint(self):
        step = self.state.global_step
        if self.is_pipeline:
            logger.info("Saving pipeline checkpoint for iteration %d to %s", step, self.checkpoint_dir)
            save_pipeline_checkpoint(
                self.checkpoint_dir, step, self.engine.stage, self.unwrapped_model.state_dict(),
                self.optimizer.state_dict(), self.scheduler.state_dict(), self.args,
            )
        else:
            ckpt_dir = os.path.join(self.checkpoint_dir, f"checkpoint-{step}")
            if self.denv.is_main:
                logger.info("Saving model checkpoint to %s", ckpt_dir)
            save_checkpoint_dir(
                ckpt_dir, self.unwrapped_model.state_dict(), self.optimizer.state_dict(),
                self.scheduler.state_dict(), self.state, self.denv.rank, self.denv.world_size, self.denv.is_main,
            )

    def save_stage_weights(self, path):
        os.makedirs(path, exist_ok=True)
        name = f"stage{self.engine.stage}.pt" if self.is_pipeline else "model.pt"
        if self.is_pipeline or self.denv.is_main:
            torch.save(self.unwrapped_model.state_dict(), os.path.join(path, name))

    def _resolve_resume_dir(self, path):
        if self.is_pipeline:
            return path
        if os.path.basename(os.path.normpath(path)).startswith("checkpoint-"):
            return path
        cands = [d for d in os.listdir(path) if d.startswith("checkpoint-")]
        if not cands:
            raise FileNotFoundError(f"No checkpoint-* directory found in {path}")
        return os.path.join(path, max(cands, key=lambda d: int(d.split("-")[1])))

    def _load_checkpoint(self, resume):
        path = self._resolve_resume_dir(resume)
        device = self.denv.device
        if self.is_pipeline:
            with open(os.path.join(path, "latest_checkpointed_iteration.txt")) as f:
                iteration = int(f.read().strip())
            ckpt_file = os.path.join(path, f"iter_{iteration:07d}", f"mp_rank_00_{self.engine.stage:03d}", "model_optim_rng.pt")
            logger.info("Loading pipeline checkpoint %s", ckpt_file)
            sd = torch.load(ckpt_file, map_location="cpu", weights_only=False)
            missing, unexpected = self.unwrapped_model.load_state_dict(sd["model"], strict=False)
            if missing or unexpected:
                logger.warning(
                    "Stage %d: missing keys %s, unexpected keys %s when loading %s",
                    self.engine.stage, missing, unexpected, ckpt_file,
                )
            self.optimizer.load_state_dict(sd["optimizer"])
            self.scheduler.load_state_dict(sd["opt_param_scheduler"])
            restore_rng_state(sd["rng_state"])
            self.state.global_step = iteration
        else:
            logger.info("Loading model from %s", path)
            self.state = TrainerState.load_from_json(os.path.join(path, "trainer_state.json"))
            self.state.max_steps = self.args["max_steps"]
            self.unwrapped_model.load_state_dict(torch.load(os.path.join(path, "model.pt"), map_location=device))
            self.optimizer.load_state_dict(torch.load(os.path.join(path, "optimizer.pt"), map_location=device))
            self.scheduler.load_state_dict(torch.load(os.path.join(path, "scheduler.pt")))
            rng_file = os.path.join(
                path, "rng_state.pth" if self.denv.world_size <= 1 else f"rng_state_{self.denv.rank}.pth"
            )
            if os.path.isfile(rng_file):
                restore_rng_state(torch.load(rng_file))
            else:
                logger.warning("Didn't find an RNG file at %s, results may not be reproducible", rng_file)
        logger.info("Resumed from %s at global step %d", path, self.state.global_step)

    # ------------------------------------------------------------------ eval
    @torch.no_grad()
    def evaluate(self):
        if self.is_pipeline:
            warnings.warn("evaluation is not supported with layout='pipeline'; skipping", UserWarning)
            return {}
        args = self.args
        model = self.unwrapped_model
        model.eval()
        device = self.denv.device
        loss_sum = torch.zeros((), device=device, dtype=torch.float64)
        tokens = torch.zeros((), device=device, dtype=torch.float64)
        correct, total = {}, {}
        preds = []
        for batch in eval_batches(self.eval_prefix, args["per_device_eval_batch_size"], self.collator,
                                  args["eval_max_batches"]):
            batch = _to_device(batch, device)
            with _autocast(device, args["bf16"]):
                _, logits = model(batch["input_ids"], batch["attention_mask"], batch["labels"])
            labels = batch["labels"]
            mask = labels != -100
            loss_sum += F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100,
                                        reduction="sum").double()
            tokens += mask.sum()
            hits = ((logits.argmax(-1) == labels) & mask).sum(1).tolist()
            counts = mask.sum(1).tolist()
            for task, h, c in zip(batch["task_ids"].tolist(), hits, counts):
                name = TASKS[task]
                correct[name] = correct.get(name, 0) + h
                total[name] = total.get(name, 0) + c
            if not args["prediction_loss_only"]:
                preds.append(logits)
        stats = torch.stack([loss_sum, tokens])
        if dist.is_initialized():
            dist.all_reduce(stats)
        eval_loss = (stats[0] / stats[1].clamp(min=1)).item()
        metrics = {"eval_loss": eval_loss, "eval_ppl": math.exp(min(eval_loss, 50))}
        for name in total:
            metrics[f"eval_acc_{name}"] = correct[name] / max(total[name], 1)
        if preds:
            all_preds = torch.cat(preds, dim=0)
            del preds
            logger.info("Gathered %s eval logits on rank %d", tuple(all_preds.shape), self.denv.rank)
            if args["gather_predictions"] and dist.is_initialized():
                gather_list = None
                if self.denv.is_main:
                    gather_list = [torch.empty_like(all_preds) for _ in range(self.denv.world_size)]
                dist.gather(all_preds, gather_list, dst=0)
                if self.denv.is_main:
                    top1 = torch.stack([g.argmax(-1) for g in gather_list])
                    metrics["eval_pred_agreement"] = (top1[0] == top1[-1]).float().mean().item()
        metrics["epoch"] = round(self.state.epoch, 2)
        self.state.log_history.append({**metrics, "step": self.state.global_step})
        model.train()
        return metrics

    # ------------------------------------------------------------------ train
    def _log(self, grad_norm, t0):
        tr_loss = self._tr_loss.clone()
        if dist.is_initialized() and not self.is_pipeline:
            dist.all_reduce(tr_loss)
            tr_loss /= self.denv.world_size
        steps = self.state.global_step - self._logged_step
        loss = round(tr_loss.item() / max(steps, 1), 4)
        self._tr_loss.zero_()
        self._logged_step = self.state.global_step
        lr = self.scheduler.get_last_lr()[0]
        logs = {
            "loss": loss,
            "grad_norm": round(float(grad_norm), 4),
            "learning_rate": lr,
            "epoch": round(self.state.epoch, 2),
        }
        self.state.log_history.append({**logs, "step": self.state.global_step})
        if self.denv.is_main:
            elapsed = time.time() - t0
            samples = self.state.global_step * self.args["per_device_train_batch_size"] * \
                self.args["gradient_accumulation_steps"] * (1 if self.is_pipeline else self.denv.world_size)
            mem = torch.cuda.memory_allocated() / 2**30 if self.denv.device.type == "cuda" else 0.0
            max_mem = torch.cuda.max_memory_allocated() / 2**30 if self.denv.device.type == "cuda" else 0.0
            logger.info("[Rank 0] step=%d, skipped=0, lr=[%.6e], mom=[(%.1f, %.3f)]", self.state.global_step, lr,
                        self.args["adam_beta1"], self.args["adam_beta2"])
            logger.info("epoch=%d/micro_step=%d/global_step=%d, RunningAvgSamplesPerSec=%.2f, MemAllocated=%.2fGB, "
                        "MaxMemAllocated=%.2fGB", int(self.state.epoch),
                        self.state.global_step * self.args["gradient_accumulation_steps"], self.state.global_step,
                        samples / max(elapsed, 1e-6), mem, max_mem)
        self.callback_handler.on_log(self.args, self.state, self.control, logs)

    def train(self):
        args, denv = self.args, self.denv
        if args.get("resume_from_checkpoint"):
            self._load_checkpoint(args["resume_from_checkpoint"])
        bsz = args["per_device_train_batch_size"] * args["gradient_accumulation_steps"]
        world_dp = 1 if self.is_pipeline else denv.world_size
        if denv.is_main:
            logger.info("***** Running training *****")
            logger.info("  Num examples = %d", self.docs_per_epoch or 0)
            logger.info("  Instantaneous batch size per device = %d", args["per_device_train_batch_size"])
            logger.info("  Total train batch size (w. parallel, distributed & accumulation) = %d", bsz * world_dp)
            logger.info("  Gradient Accumulation steps = %d", args["gradient_accumulation_steps"])
            logger.info("  Total optimization steps = %d", self.state.max_steps)
        self.callback_handler.on_train_begin(args, self.state, self.control)
        data_iter = iter(self.train_stream)
        steps_per_epoch = max((self.docs_per_epoch or bsz) // bsz, 1)
        t0 = time.time()
        try:
            while self.state.global_step < self.state.max_steps:
                self.control.reset_step()
                self.callback_handler.on_step_begin(args, self.state, self.control)
                loss = self.engine.train_step(data_iter)
                grad_norm = self.engine.clip_grad(args["max_grad_norm"])
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.state.global_step += 1
                self.state.epoch = self.state.global_step / steps_per_epoch
                self.state.last_local_loss = loss.item()
                self._tr_loss += loss.detach()
                step = self.state.global_step
                self.control.should_log = step % args["logging_steps"] == 0
                self.control.should_evaluate = bool(args["eval_steps"]) and step % args["eval_steps"] == 0
                self.control.should_save = bool(args["save_steps"]) and step % args["save_steps"] == 0
                self.callback_handler.on_step_end(args, self.state, self.control)
                if self.control.should_log:
                    self._log(grad_norm, t0)
                if self.control.should_evaluate:
                    metrics = self.evaluate()
                    if metrics:
                        self.callback_handler.on_evaluate(args, self.state, self.control, metrics)
                if self.control.should_save:
                    self._save_checkpoint()
                    self.callback_handler.on_save(args, self.state, self.control)
                if self.control.should_training_stop:
                    break
        except Exception as exc:
            self.callback_handler.on_exception(args, self.state, self.control, exc)
            raise
        self.callback_handler.on_train_end(args, self.state, self.control)
        if denv.is_main:
            logger.info("Training completed in %.1fs (%d steps)", time.time() - t0, self.state.global_step)
        return self.state
