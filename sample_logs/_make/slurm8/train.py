"""Train a small transformer translation model with DDP (gloo) and beam-search BLEU validation.

    python train.py --config configs/base.toml [section.key=value ...]
"""
import argparse
import logging
import math
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from nmt import __version__
from nmt import dist as ndist
from nmt.bleu import corpus_stats, bleu_from_stats
from nmt.config import load_config
from nmt.data import Dictionary, ParallelShard, batches, collate
from nmt.logutil import setup_logging
from nmt.model import TransformerSeq2Seq, label_smoothed_nll
from nmt.search import beam_search

log = logging.getLogger("nmt.train")


def inverse_sqrt(warmup_updates, warmup_init_lr, lr):
    def factor(step):
        if step < warmup_updates:
            return (warmup_init_lr + (lr - warmup_init_lr) * step / warmup_updates) / lr
        return (warmup_updates ** 0.5) * (step ** -0.5)
    return factor


def save_checkpoint(path, model, optim, sched, step, epoch, cfg, dicts):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": optim.state_dict(), "lr_scheduler": sched.state_dict(),
                "step": step, "epoch": epoch, "cfg": cfg, "dictionaries": dicts}, tmp)
    os.replace(tmp, path)
    log.info("saved checkpoint %s (epoch %d @ %d updates)", path, epoch, step)


@torch.no_grad()
def validate(cfg, model, shard, tgt_dict, rank, world):
    model.eval()
    ev = cfg["eval"]
    loss_sum, ntok = 0.0, 0
    if len(shard):
        for src, prev, tgt in batches(shard, ev.get("batch_size", 64), 0, 0, shuffle=False):
            _, nll, n = label_smoothed_nll(model(src, prev), tgt, 0.0)
            loss_sum += nll.item()
            ntok += n.item()
    loss = loss_sum / max(ntok, 1) / math.log(2)
    hyps, refs = [], []
    n = min(len(shard), ev.get("max_sentences", 32))
    for i in range(0, n, ev.get("batch_size", 64)):
        idx = range(i, min(n, i + ev.get("batch_size", 64)))
        src, _, tgt = collate([(shard.src[j], shard.tgt[j]) for j in idx])
        out = beam_search(model, src, beam=ev.get("beam", 4), max_len_a=ev.get("max_len_a", 1.2),
                          max_len_b=ev.get("max_len_b", 0), min_len_a=ev.get("min_len_a", 0.5))
        hyps += [tgt_dict.string(h) for h in out]
        refs += [tgt_dict.string(t.tolist()) for t in tgt]
    if ev.get("scorer", "builtin") == "sacrebleu":
        gathered = [None] * world
        dist.all_gather_object(gathered, (hyps, refs)) if world > 1 else gathered.__setitem__(0, (hyps, refs))
        score = [0.0]
        if rank == 0:
            import sacrebleu
            all_h = [h for g in gathered for h in g[0]]
            all_r = [r for g in gathered for r in g[1]]
            score = [sacrebleu.corpus_bleu(all_h, [all_r]).score]
        if world > 1:
            dist.broadcast_object_list(score, src=0)
        bleu = score[0]
    else:
        bleu = bleu_from_stats(*corpus_stats(hyps, refs))
        if world > 1:
            t = torch.tensor([bleu])
            dist.all_reduce(t)
            bleu = t.item() / world
    model.train()
    if hyps:
        log.debug("H-0\t%s", hyps[0])
    return loss, bleu


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--restore-file", default=None)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()

    rank, world, local_rank = ndist.env_rank()
    setup_logging(rank, world)
    cfg = load_config(args.config, args.overrides)
    if rank == 0:
        log.info("nmt %s, torch %s, config %s", __version__, torch.__version__, args.config)
        log.info("cfg: %s", cfg)
    torch.manual_seed(cfg["train"].get("seed", 1))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))
    ndist.init(cfg, rank, world)

    d = cfg["data"]
    src_dict = Dictionary.load(os.path.join(d["path"], "dict.src.txt"))
    tgt_dict = Dictionary.load(os.path.join(d["path"], "dict.tgt.txt"))
    log.info("dictionary: %d source types, %d target types", len(src_dict), len(tgt_dict))
    m = cfg["model"]
    model = TransformerSeq2Seq(len(src_dict), len(tgt_dict), m["dim"], m["heads"], m["layers"], m["ffn"],
                               m.get("dropout", 0.1), m.get("max_positions", 128))
    if rank == 0:
        log.info("model: %d parameters", sum(p.numel() for p in model.parameters()))

    t = cfg["train"]
    o = cfg["optimizer"]
    optim = torch.optim.Adam(model.parameters(), lr=o["lr"], betas=(0.9, 0.98), eps=1e-8,
                             weight_decay=o.get("weight_decay", 0.0))
    sched = torch.optim.lr_scheduler.LambdaLR(optim, inverse_sqrt(o.get("warmup_updates", 4000),
                                                                  o.get("warmup_init_lr", 1e-7), o["lr"]))
    step, epoch0 = 0, 1
    restore = args.restore_file or cfg.get("checkpoint", {}).get("restore_file")
    if restore:
        log.info("loading checkpoint %s", restore)
        state = torch.load(restore, map_location="cpu")
        model.load_state_dict(state["model"])
        if not cfg["checkpoint"].get("reset_optimizer", False):
            optim.load_state_dict(state["optimizer"])
            step = state["step"]
        log.info("restored from %s (epoch %d @ %d updates)", restore, state["epoch"], state["step"])

    ddp = DDP(model) if world > 1 else model
    shard = rank % d.get("num_shards", world)
    train = ParallelShard(d["path"], "train", shard, src_dict, tgt_dict)
    valid = ParallelShard(d["path"], "valid", shard, src_dict, tgt_dict)

    ckdir = cfg["checkpoint"].get("save_dir", "checkpoints")
    best, bad, stop = float("inf"), 0, False
    t0 = time.time()
    for epoch in range(epoch0, t.get("max_epoch", 100) + 1):
        for src, prev, tgt in batches(train, t["batch_size"], t.get("seed", 1), epoch):
            logits = ddp(src, prev)
            loss, nll, ntok = label_smoothed_nll(logits, tgt, t.get("label_smoothing", 0.1))
            optim.zero_grad(set_to_none=True)
            (loss / ntok).backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), t.get("clip_norm", 1.0))
            optim.step()
            sched.step()
            step += 1
            if step % t.get("log_interval", 10) == 0:
                log.info("epoch %03d | step %d | loss %.3f | nll_loss %.3f | ntokens %d | lr %.3g | gnorm %.3f | "
                         "wps %.0f", epoch, step, loss.item() / ntok.item() / math.log(2),
                         nll.item() / ntok.item() / math.log(2), ntok.item(), sched.get_last_lr()[0],
                         gnorm.item(), ntok.item() * step / (time.time() - t0))
            if step % t.get("validate_interval", 50) == 0:
                vloss, bleu = validate(cfg, model, valid, tgt_dict, rank, world)
                log.info("valid on '%s' | epoch %03d | step %d | loss %.3f | bleu %.2f", valid.name, epoch, step,
                         vloss, bleu)
                if vloss < best - 1e-4:
                    best, bad = vloss, 0
                else:
                    bad += 1
                    patience = t.get("patience", 0)
                    if patience and bad >= patience:
                        log.info("early stop since valid performance hasn't improved for last %d runs", bad)
                        stop = True
                        break
            if rank == 0 and step % cfg["checkpoint"].get("save_interval", 100) == 0:
                save_checkpoint(os.path.join(ckdir, "checkpoint_last.pt"), model, optim, sched, step, epoch, cfg,
                                {"src": src_dict, "tgt": tgt_dict})
            if step >= t.get("max_update", 10**9):
                stop = True
                break
        log.info("end of epoch %d (%d updates)", epoch, step)
        if stop:
            break
    if rank == 0:
        save_checkpoint(os.path.join(ckdir, "checkpoint_last.pt"), model, optim, sched, step, epoch, cfg,
                        {"src": src_dict, "tgt": tgt_dict})
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    log.info("done training in %.1f seconds", time.time() - t0)


if __name__ == "__main__":
    main()
