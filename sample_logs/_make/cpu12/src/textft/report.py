"""End-of-run report: loss curve plot + json summary."""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def write_report(history, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    steps = [h["step"] for h in history]
    losses = [h["loss"] for h in history]
    plt.plot(steps, losses)
    plt.xlabel("step")
    plt.ylabel("loss")
    plt.savefig(os.path.join(out_dir, "loss.png"))
    with open(os.path.join(out_dir, "history.json"), "w") as f:
        json.dump(history, f)
