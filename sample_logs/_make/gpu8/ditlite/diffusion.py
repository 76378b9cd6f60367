"""Gaussian diffusion: noise schedules, timestep samplers, training loss and a DDIM sampler."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def make_betas(kind: str, T: int) -> torch.Tensor:
    if kind == "linear":
        return torch.linspace(1e-4, 0.02, T, dtype=torch.float64)
    if kind == "cosine":
        s = 0.008
        steps = torch.arange(T + 1, dtype=torch.float64) / T
        ac = torch.cos((steps + s) / (1 + s) * math.pi / 2) ** 2
        return (1 - ac[1:] / ac[:-1]).clamp(max=0.999)
    raise ValueError(f"unknown beta schedule {kind!r}")


class GaussianDiffusion:
    def __init__(self, cfg, device):
        self.T = cfg.num_timesteps
        self.sampling = cfg.timestep_sampling
        betas = make_betas(cfg.beta_schedule, self.T)
        ac = torch.cumprod(1 - betas, 0)
        self.alphas_cumprod = ac.float().to(device)
        self.sqrt_ac = ac.sqrt().float().to(device)
        self.sqrt_1m_ac = (1 - ac).sqrt().float().to(device)
        self.device = device

    def sample_timesteps(self, b: int, rank: int, world: int) -> torch.Tensor:
        if self.sampling == "uniform":
            return torch.randint(0, self.T, (b,), device=self.device)
        if self.sampling == "stratified":
            # one stratum per sample over the *global* batch, so every step covers the
            # whole [0, T) range evenly (lower-variance loss); +1 keeps t=0 out.
            idx = torch.arange(1, b + 1, device=self.device) + rank * b
            u = idx.float() / (b * world)
            return (u * self.T).long()
        raise ValueError(f"unknown timestep sampling {self.sampling!r}")

    def q_sample(self, x0, t, noise):
        a = self.sqrt_ac[t].view(-1, 1, 1, 1)
        s = self.sqrt_1m_ac[t].view(-1, 1, 1, 1)
        return a * x0 + s * noise

    def training_loss(self, model, x0, y, rank=0, world=1):
        t = self.sample_timesteps(x0.shape[0], rank, world)
        noise = torch.randn_like(x0)
        xt = self.q_sample(x0, t, noise)
        out = model(xt, t, y)
        eps = out[:, : x0.shape[1]]
        return F.mse_loss(eps.float(), noise.float())

    @torch.no_grad()
    def ddim_sample(self, model, shape, y, steps=50, cfg_scale=1.0, generator=None, progress=None):
        x = torch.randn(shape, device=self.device, generator=generator)
        ts = torch.linspace(self.T - 1, 0, steps, device=self.device).long()
        for i, t in enumerate(ts):
            tb = t.repeat(shape[0])
            if cfg_scale != 1.0:
                eps = model.forward_with_cfg(x, tb, y, cfg_scale)
            else:
                eps = model(x, tb, y)[:, : shape[1]]
            a_t = self.alphas_cumprod[t]
            a_prev = self.alphas_cumprod[ts[i + 1]] if i + 1 < len(ts) else torch.ones_like(a_t)
            x0 = (x - (1 - a_t).sqrt() * eps.float()) / a_t.sqrt()
            x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps.float()
            if progress is not None:
                progress(i + 1, len(ts))
        return x
