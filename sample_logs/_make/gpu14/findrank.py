#!/usr/bin/env python3
"""Print the pid of a torchrun worker (by global RANK) or of one of its DataLoader workers.

Harness helper, never copied into the job directory.
    findrank.py --rank 1 [--loader-worker] [--cwd DIR]
A worker process carries RANK in its environment and its parent (the torchrun agent) does not;
DataLoader workers are forked from the worker, so their parent carries the same RANK.
"""
import argparse
import os
import sys


def env_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            items = fh.read().split(b"\0")
    except OSError:
        return {}
    out = {}
    for it in items:
        k, _, v = it.partition(b"=")
        out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def ppid_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def cwd_of(pid):
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--loader-worker", action="store_true")
    ap.add_argument("--cwd", default="")
    a = ap.parse_args()
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        env = env_of(pid)
        if env.get("RANK") != str(a.rank) or "TORCHELASTIC_RUN_ID" not in env:
            continue
        if a.cwd and os.path.realpath(cwd_of(pid)) != os.path.realpath(a.cwd):
            continue
        parent_rank = env_of(ppid_of(pid)).get("RANK")
        is_loader = parent_rank == str(a.rank)
        if is_loader == a.loader_worker:
            print(pid)
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
