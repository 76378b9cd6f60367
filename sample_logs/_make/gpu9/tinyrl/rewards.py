"""Reward functions: token overlap with the reference answer, a math verifier, a code sandbox, a reward model."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys

import torch

log = logging.getLogger("tinyrl.rewards")


def match_reward(rec: dict, completion: list) -> float:
    ans = list(rec.get("answer") or [])
    if not ans:
        return 0.0
    hit = sum(1 for t in ans if t in completion)
    return hit / len(ans)


def math_reward(rec: dict, completion: list) -> float:
    from math_verify import parse, verify  # optional dependency, only needed for math prompts
    gold = parse(rec["answer_text"])
    return float(verify(gold, parse(" ".join(map(str, completion)))))


class CodeSandbox:
    """Runs the prompt's unit test in a child interpreter; the completion is passed on stdin."""

    def __init__(self, python: str, timeout):
        self.python, self.timeout = python or sys.executable, timeout

    def __call__(self, rec: dict, completion: list) -> float:
        proc = subprocess.Popen([self.python, "-c", rec["test"]], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(" ".join(map(str, completion)), timeout=self.timeout)
        except subprocess.TimeoutExpired:
            # kill the test and anything it started
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
            proc.wait()
            return 0.0
        return 1.0 if proc.returncode == 0 else 0.0


class RewardStack:
    def __init__(self, rcfg, reward_model=None, device="cpu"):
        self.kinds = [k.strip() for k in rcfg.kinds.split(",") if k.strip()]
        self.rm = reward_model
        self.rcfg = rcfg
        self.device = device
        self.sandbox = CodeSandbox(rcfg.sandbox_python, rcfg.sandbox_timeout)

    def rule_rewards(self, records: list, completions: list) -> torch.Tensor:
        out = []
        for rec, comp in zip(records, completions):
            task = rec.get("task", "match")
            if task == "math" and "math" in self.kinds:
                out.append(math_reward(rec, comp))
            elif task == "code" and "code" in self.kinds:
                out.append(self.sandbox(rec, comp))
            else:
                out.append(match_reward(rec, comp))
        return torch.tensor(out, dtype=torch.float32)
