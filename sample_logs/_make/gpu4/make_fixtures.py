"""Produce checkpoints in the trainer's own formats, as an earlier run of
finetune.py would have left them (used to prepare resume runs).

    python make_fixtures.py ddp-checkpoint --config cfg.json --out DIR --step N --world-size W [--set k=v ...]
    python make_fixtures.py pipeline-checkpoint --config cfg.json --out DIR --step N [--set k=v ...]
"""

import argparse

import torch

from finetune import load_config
from modeling import ModelConfig, build_model, build_stage
from trainer import build_optimizer, build_scheduler, save_checkpoint_dir, save_pipeline_checkpoint
from trainer_utils import TrainerState, set_seed


def _fake_step(model, optimizer, scheduler, vocab, first_stage, last_stage, d_model):
    ids = torch.randint(3, vocab, (2, 16))
    labels = torch.randint(3, vocab, (2, 16))
    inputs = ids if first_stage else torch.randn(2, 16, d_model)
    if last_stage:
        loss, _ = model(inputs, None, labels)
    else:
        loss = model(inputs).pow(2).mean()
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["ddp-checkpoint", "pipeline-checkpoint"])
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--step", type=int, default=20)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--set", action="append", default=[])
    a = ap.parse_args()
    cfg = load_config(a.config, a.set)
    cfg["resume_from_checkpoint"] = None
    set_seed(cfg["seed"])
    mcfg = ModelConfig.from_dict(cfg["model"])
    if a.kind == "ddp-checkpoint":
        model = build_model(mcfg)
        opt = build_optimizer(model, cfg)
        sched = build_scheduler(opt, cfg["warmup_steps"], cfg["max_steps"])
        for _ in range(a.step):
            _fake_step(model, opt, sched, mcfg.vocab_size, True, True, mcfg.d_model)
        state = TrainerState(global_step=a.step, max_steps=cfg["max_steps"], epoch=a.step / 10.0)
        ckpt_dir = f"{a.out}/checkpoint-{a.step}"
        for rank in range(a.world_size):
            save_checkpoint_dir(ckpt_dir, model.state_dict(), opt.state_dict(), sched.state_dict(), state,
                                rank, a.world_size, rank == 0)
        print(f"wrote {ckpt_dir}")
    else:
        n = cfg["pipeline_stages"]
        for stage in range(n):
            model = build_stage(mcfg, stage, n, cfg["pipeline_split"])
            opt = build_optimizer(model, cfg)
            sched = build_scheduler(opt, cfg["warmup_steps"], cfg["max_steps"])
            for _ in range(a.step):
                _fake_step(model, opt, sched, mcfg.vocab_size, stage == 0, stage == n - 1, mcfg.d_model)
            save_pipeline_checkpoint(a.out, a.step, stage, model.state_dict(), opt.state_dict(),
                                     sched.state_dict(), cfg)
        print(f"wrote pipeline checkpoint iteration {a.step} to {a.out}")


if __name__ == "__main__":
    main()
