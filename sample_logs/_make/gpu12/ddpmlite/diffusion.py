"""Noise schedule, training loss and a strided (DDIM, eta=0) sampler."""
import math

import torch
import torch.nn.functional as F


def make_betas(cfg):
    T = cfg.timesteps
    if cfg.schedule == "linear":
        return torch.linspace(cfg.beta_start, cfg.beta_end, T, dtype=torch.float64)
    s = 0.008
    x = torch.linspace(0, T, T + 1, dtype=torch.float64)
    ac = torch.cos(((x / T) + s) / (1 + s) * math.pi * 0.5) ** 2
    ac = ac / ac[0]
    return (1 - ac[1:] / ac[:-1]).clamp(max=0.999)


class GaussianDiffusion:
    def __init__(self, cfg, device):
        self.T = cfg.timesteps
        betas = make_betas(cfg)
        ac = torch.cumprod(1 - betas, dim=0)
        self.alphas_cumprod = ac.float().to(device)
        self.sqrt_ac = ac.sqrt().float().to(device)
        self.sqrt_1mac = (1 - ac).sqrt().float().to(device)

    def q_sample(self, x0, t, noise):
        return self.sqrt_ac[t][:, None, None, None] * x0 + self.sqrt_1mac[t][:, None, None, None] * noise

    def loss(self, model, x0, y):
        t = torch.randint(0, self.T, (x0.shape[0],), device=x0.device)
        noise = torch.randn_like(x0)
        pred = model(self.q_sample(x0, t, noise), t, y)
        return F.mse_loss(pred.float(), noise)

    @torch.no_grad()
    def sample(self, model, shape, y, steps, device):
        ts = torch.linspace(self.T - 1, 0, steps, device=device).round().long()
        x = torch.randn(shape, device=device)
        for i, t in enumerate(ts):
            tt = torch.full((shape[0],), int(t), device=device, dtype=torch.long)
            eps = model(x, tt, y)
            a_t = self.alphas_cumprod[t]
            a_prev = self.alphas_cumprod[ts[i + 1]] if i + 1 < len(ts) else torch.tensor(1.0, device=device)
            x0 = ((x - (1 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-1, 1)
            x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
        return x
