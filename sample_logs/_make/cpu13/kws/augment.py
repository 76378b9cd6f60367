import torch
import torchaudio


class SpeedPerturb(torch.nn.Module):
    def __init__(self, factors=(0.9, 1.0, 1.1), sample_rate=8000):
        super().__init__()
        self.factors = factors
        self.sample_rate = sample_rate

    def forward(self, wav):
        f = self.factors[torch.randint(len(self.factors), ()).item()]
        out = torchaudio.functional.resample(wav, self.sample_rate, int(self.sample_rate * f))
        out = out[: wav.shape[-1]]
        return torch.nn.functional.pad(out, (0, wav.shape[-1] - out.shape[-1]))
