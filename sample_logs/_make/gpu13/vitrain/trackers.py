"""Metric trackers (rank 0): JSON lines on disk, or an Aim run."""
from __future__ import annotations

import json
import os
import time


class JsonlTracker:
    def __init__(self, path, cfg_dict):
        self.f = open(path, "a")
        self.f.write(json.dumps({"event": "start", "time": time.time()}) + "\n")

    def log(self, step, metrics):
        self.f.write(json.dumps({"step": step, **metrics}) + "\n")
        self.f.flush()

    def close(self):
        self.f.close()


class AimTracker:
    def __init__(self, repo, cfg_dict):
        from aim import Run
        self.run = Run(repo=repo, experiment="vitrain")
        self.run["hparams"] = cfg_dict

    def log(self, step, metrics):
        for k, v in metrics.items():
            self.run.track(v, name=k, step=step)

    def close(self):
        self.run.close()


class NullTracker:
    def log(self, step, metrics):
        pass

    def close(self):
        pass


def build_tracker(kind, workdir, cfg_dict):
    if kind == "jsonl":
        return JsonlTracker(os.path.join(workdir, "metrics.jsonl"), cfg_dict)
    if kind == "aim":
        return AimTracker(os.path.join(workdir, ".aim"), cfg_dict)
    return NullTracker()
