"""Distributed PPO trainer: each learner rank drives its own rollout worker processes,
computes GAE and PPO losses, and DDP (gloo) averages the gradients across learners."""
import argparse
import datetime
import json
import logging
import os
import signal
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ppo.config import load_config
from ppo.envs import GridWorld, SubprocVecEnv
from ppo.model import ActorCritic

log = logging.getLogger("ppo")
_STOP = {"flag": False}


def dist_info():
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:        # torchrun
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    rank = int(os.environ.get("SLURM_PROCID", 0))                   # plain srun, one task per rank
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", 1)))
    local = int(os.environ.get("SLURM_LOCALID", 0))
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    return rank, world, local


def setup_logging(rank, run_dir):
    host = socket.gethostname()
    fmt = f"%(asctime)s %(levelname)s [{host}:rank{rank}] %(name)s: %(message)s"
    handlers = [logging.StreamHandler(sys.stdout)]
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    handlers.append(logging.FileHandler(os.path.join(run_dir, "logs", f"train_rank{rank}.log")))
    logging.basicConfig(level=logging.INFO, format=fmt, handlers=handlers, force=True)


def load_level(cfg, rank):
    pattern = cfg["env"].get("level_files")
    if not pattern:
        return {"size": cfg["env"]["size"], "walls": cfg["env"]["walls"]}
    path = os.path.join(cfg["run_dir"], pattern.format(rank=rank))
    with open(path) as f:
        return json.load(f)


def make_envs(cfg, rank, n):
    level = load_level(cfg, rank)
    slips = cfg["env"]["slip_probs"]
    slip = slips[rank % len(slips)]
    kws = [dict(size=level["size"], walls=level["walls"], slip_prob=slip,
                max_steps=cfg["env"]["max_steps"], seed=cfg["seed"] * 1000 + rank * 16 + i) for i in range(n)]
    log.info("rollout workers: %d envs, grid %dx%d, %d walls, slip=%.2f", n, level["size"], level["size"],
             len(level["walls"]), slip)
    return SubprocVecEnv(kws)


def gae(rew, val, done, last_val, gamma, lam):
    T = rew.shape[0]
    adv = torch.zeros_like(rew)
    last = torch.zeros_like(last_val)
    for t in reversed(range(T)):
        nxt = last_val if t == T - 1 else val[t + 1]
        nonterm = 1.0 - done[t]
        delta = rew[t] + gamma * nxt * nonterm - val[t]
        last = delta + gamma * lam * nonterm * last
        adv[t] = last
    return adv, adv + val


@torch.no_grad()
def evaluate(model, cfg, episodes):
    env = GridWorld(size=cfg["env"]["size"], walls=cfg["env"]["walls"], max_steps=cfg["env"]["max_steps"],
                    seed=12345)
    rets, succ = [], 0
    frames = None
    if cfg["eval"].get("record"):
        frames = np.zeros((episodes, env.max_steps, env.obs_dim), dtype=np.float32)
    for ep in range(episodes):
        o, ret = env.reset(), 0.0
        for _ in range(env.max_steps):
            if frames is not None:
                frames[ep, env.t] = o
            logits, _ = model(torch.as_tensor(o).unsqueeze(0))
            o, r, d = env.step(int(logits.argmax(-1)))
            ret += r
            if d:
                succ += r > 0
                break
        rets.append(ret)
    return float(np.mean(rets)), succ / max(episodes, 1)


def save_checkpoint(path, model, opt, it, cfg):
    tmp = path + ".tmp"
    torch.save({"model": model.module.state_dict(), "optim": opt.state_dict(), "iteration": it,
                "config": cfg}, tmp)
    os.replace(tmp, path)
    log.info("saved checkpoint %s (iteration %d)", path, it)


def _on_usr1(signum, frame):
    _STOP["flag"] = True
    log.warning("received signal %d, will checkpoint and stop after this iteration", signum)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[], help="dotted override, e.g. ppo.lr=1e-3")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, args.set)
    rank, world, local_rank = dist_info()
    setup_logging(rank, cfg["run_dir"])
    torch.set_num_threads(1)
    signal.signal(signal.SIGUSR1, _on_usr1)
    log.info("starting pid=%d world_size=%d local_rank=%d job=%s step=%s master=%s:%s", os.getpid(), world,
             local_rank, os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID"),
             os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"))

    dist.init_process_group(cfg["dist"]["backend"], rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=cfg["dist"]["timeout_s"]))
    log.info("process group ready (%s)", cfg["dist"]["backend"])

    p = cfg["ppo"]
    n_envs = p["envs_per_rank"]
    if p.get("total_envs"):
        if p["total_envs"] % world != 0:
            raise ValueError(f"ppo.total_envs={p['total_envs']} is not divisible by world size {world}")
        n_envs = p["total_envs"] // world
    batch = n_envs * p["rollout_len"]
    assert batch % p["num_minibatches"] == 0, \
        f"rollout batch {batch} ({n_envs} envs x {p['rollout_len']} steps) not divisible by num_minibatches={p['num_minibatches']}"
    mb_size = batch // p["num_minibatches"]

    torch.manual_seed(cfg["seed"])
    obs_dim = 3 * cfg["env"]["size"] ** 2
    model = DDP(ActorCritic(obs_dim, 4, cfg["model"]["hidden"]))
    opt = torch.optim.Adam(model.parameters(), lr=p["lr"])

    ck_dir = os.path.join(cfg["run_dir"], cfg["checkpoint"]["dir"])
    os.makedirs(ck_dir, exist_ok=True)
    ck_path = os.path.join(ck_dir, "latest.pt")
    start_it = 0
    if cfg["checkpoint"]["resume"] == "auto" and os.path.exists(ck_path):
        log.info("resuming from %s", ck_path)
        state = torch.load(ck_path, map_location="cpu", weights_only=False)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start_it = state["iteration"]
        log.info("resumed at iteration %d", start_it)

    writer = None
    if rank == 0 and cfg["logging"]["tensorboard"]:
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(os.path.join(cfg["run_dir"], "tb"))

    envs = make_envs(cfg, rank, n_envs)
    eval_rank = world - 1 if cfg["eval"]["on_last_rank"] else 0
    obs = torch.as_tensor(envs.reset())
    ep_ret = np.zeros(n_envs)
    finished = []
    it = start_it
    try:
        for it in range(start_it + 1, p["iterations"] + 1):
            t0 = time.time()
            buf_o, buf_a, buf_lp, buf_v, buf_r, buf_d = [], [], [], [], [], []
            with torch.no_grad():
                for _ in range(p["rollout_len"]):
                    logits, v = model.module(obs)
                    dist_a = torch.distributions.Categorical(logits=logits)
                    a = dist_a.sample()
                    nobs, r, d = envs.step(a.numpy())
                    buf_o.append(obs); buf_a.append(a); buf_lp.append(dist_a.log_prob(a)); buf_v.append(v)
                    buf_r.append(torch.as_tensor(r)); buf_d.append(torch.as_tensor(d))
                    ep_ret += r
                    for i in np.nonzero(d)[0]:
                        finished.append(ep_ret[i]); ep_ret[i] = 0.0
                    obs = torch.as_tensor(nobs)
                _, last_v = model.module(obs)
            rew, val, done = torch.stack(buf_r), torch.stack(buf_v), torch.stack(buf_d)
            adv, ret = gae(rew, val, done, last_v, p["gamma"], p["lam"])
            O = torch.stack(buf_o).reshape(batch, -1)
            A, LP = torch.stack(buf_a).reshape(-1), torch.stack(buf_lp).reshape(-1)
            ADV, RET = adv.reshape(-1), ret.reshape(-1)
            ADV = (ADV - ADV.mean()) / (ADV.std() + 1e-8)
            for _ in range(p["epochs"]):
                perm = torch.randperm(batch)
                for s in range(0, batch, mb_size):
                    idx = perm[s:s + mb_size]
                    logits, v = model(O[idx])
                    d_ = torch.distributions.Categorical(logits=logits)
                    ratio = torch.exp(d_.log_prob(A[idx]) - LP[idx])
                    pg = -torch.min(ratio * ADV[idx], ratio.clamp(1 - p["clip"], 1 + p["clip"]) * ADV[idx]).mean()
                    loss = pg + p["vf_coef"] * F.mse_loss(v, RET[idx]) - p["ent_coef"] * d_.entropy().mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            mean_ret = float(np.mean(finished[-20:])) if finished else float("nan")
            if it % cfg["logging"]["every"] == 0:
                log.info("iter %d/%d loss=%.4f mean_return=%.3f steps/s=%.0f", it, p["iterations"], loss.item(),
                         mean_ret, batch / (time.time() - t0))
            if writer is not None:
                writer.add_scalar("train/return", mean_ret, it)
            if rank == eval_rank and it % cfg["eval"]["every"] == 0:
                log.info("evaluation: %d episodes", cfg["eval"]["episodes"])
                r_, s_ = evaluate(model.module, cfg, cfg["eval"]["episodes"])
                log.info("evaluation: mean_return=%.3f success=%.2f", r_, s_)
            if rank == 0 and it % cfg["checkpoint"]["every"] == 0:
                save_checkpoint(ck_path, model, opt, it, cfg)
            if os.path.exists(os.path.join(cfg["run_dir"], "STOP")):
                _STOP["flag"] = True
            if _STOP["flag"]:
                if rank == 0:
                    save_checkpoint(ck_path, model, opt, it, cfg)
                log.warning("stopping early at iteration %d on signal", it)
                break
        else:
            if rank == 0:
                save_checkpoint(ck_path, model, opt, it, cfg)
        log.info("training finished at iteration %d", it)
    finally:
        envs.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
