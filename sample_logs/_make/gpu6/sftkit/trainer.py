import contextlib
import logging
import os
import time

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from .callbacks import TrainerControl, TrainerState
from .data import IGNORE
from .distributed import all_reduce_sum
from .lora import merge_lora
from .parallel import unwrap

logger = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg, info, model, optimizer, scheduler, train_loader, eval_loader=None,
                 callbacks=(), ckpt=None):
        self.cfg, self.info = cfg, info
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.train_loader, self.eval_loader = train_loader, eval_loader
        self.callbacks = list(callbacks)
        self.ckpt = ckpt
        self.state = TrainerState()
        self.control = TrainerControl()
        cuda = info.device.type == "cuda"
        self.amp_dtype = torch.bfloat16 if (cfg.train.precision == "bf16" and cuda) else None
        if cfg.train.precision == "bf16" and not cuda:
            logger.warning("bf16 autocast disabled on CPU, training in fp32")

    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.info.device.type, dtype=self.amp_dtype)

    def _call(self, event, *args):
        for cb in self.callbacks:
            getattr(cb, event)(self, *args)

    def _batches(self):
        while True:
            sampler = self.train_loader.sampler
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(self.state.epoch)
            for batch in self.train_loader:
                yield batch
            self.state.epoch += 1

    def compute_loss(self, batch):
        ids = batch["input_ids"].to(self.info.device, non_blocking=True)
        labels = batch["labels"].to(self.info.device, non_blocking=True)
        w = self.cfg.train.mtp_loss_weight
        with self._autocast():
            if w > 0:
                logits, mtp_logits = self.model(ids, return_mtp=True)
            else:
                logits = self.model(ids)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1),
                               ignore_index=IGNORE)
        if w > 0:
            mtp_labels = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], IGNORE)], 1)
            loss = loss + w * F.cross_entropy(mtp_logits.float().view(-1, mtp_logits.size(-1)),
                                              mtp_labels.view(-1), ignore_index=IGNORE)
        return loss, int((labels != IGNORE).sum())

    def train(self):
        cfg = self.cfg
        ga = cfg.train.grad_accum
        logger.info("***** Running training *****")
        logger.info("  Num examples = %d", len(self.train_loader.dataset))
        logger.info("  Micro batch size per device = %d", cfg.train.micro_batch_size)
        logger.info("  Gradient accumulation steps = %d", ga)
        logger.info("  Total train batch size (w. parallel & accumulation) = %d",
                    cfg.train.micro_batch_size * ga * self.info.world_size)
        logger.info("  Total optimization steps = %d (starting at %d)", cfg.train.steps, self.state.step)
        it = self._batches()
        self.model.train()
        self._call("on_train_begin")
        while self.state.step < cfg.train.steps:
            total, ntok = 0.0, 0
            for micro in range(ga):
                batch = next(it)
                sync_ctx = (self.model.no_sync() if isinstance(self.model, DDP) and micro < ga - 1
                            else contextlib.nullcontext())
                with sync_ctx:
                    loss, n = self.compute_loss(batch)
                    (loss / ga).backward()
                total += loss.item() / ga
                ntok += n
            gnorm = torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.requires_grad], cfg.train.max_grad_norm)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.state.step += 1
            logs = {"loss": total, "lr": self.scheduler.get_last_lr()[0],
                    "grad_norm": float(gnorm), "tokens": ntok}
            self._call("on_step_end", logs)
            if self.control.should_evaluate:
                self.control.should_evaluate = False
                self.evaluate()
            if self.control.should_save:
                self.control.should_save = False
                self.ckpt.save(self.state.step, self.model, self.optimizer, self.state)
            if self.control.should_stop:
                break
        self._call("on_train_end")
        logger.info("Training finished at step %d", self.state.step)

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        t0 = time.time()
        loss_sum, n_tok, n_correct = 0.0, 0, 0
        for i, batch in enumerate(self.eval_loader):
            if i >= self.cfg.eval.max_batches:
                break
            ids = batch["input_ids"].to(self.info.device)
            labels = batch["labels"].to(self.info.device)
            with self._autocast():
                logits = self.model(ids)
            loss_sum += F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.view(-1),
                                        ignore_index=IGNORE, reduction="sum").item()
            mask = labels != IGNORE
            n_tok += int(mask.sum())
            n_correct += int(((logits.argmax(-1) == labels) & mask).sum())
        local = {"eval_loss": loss_sum / n_tok, "eval_token_acc": n_correct / n_tok, "eval_tokens": n_tok}
        s_loss, s_tok, s_cor = all_reduce_sum([loss_sum, n_tok, n_correct], self.info)
        glob = {"eval_loss": s_loss / s_tok, "eval_token_acc": s_cor / s_tok, "eval_tokens": int(s_tok)}
        logger.info("eval @ step %d: eval_loss %.4f | eval_ppl %.2f | eval_token_acc %.4f | tokens %d | %.2fs",
                    self.state.step, glob["eval_loss"], min(2.718281828 ** glob["eval_loss"], 1e9),
                    glob["eval_token_acc"], glob["eval_tokens"], time.time() - t0)
        self.state.log_history.append({"step": self.state.step, **glob})
        self._call("on_evaluate", local)
        self.model.train()
        return glob

    def export(self):
        out = self.cfg.export.path
        n = merge_lora(unwrap(self.model))
        logger.info("Merged %d LoRA adapters into the base weights", n)
        if self.info.is_main:
            os.makedirs(out, exist_ok=True)
            sd = {k: v for k, v in unwrap(self.model).state_dict().items() if "lora_" not in k}
            torch.save(sd, os.path.join(out, "model.pt"))
            logger.info("Exported merged model to %s", out)
