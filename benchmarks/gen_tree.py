"""Build a large synthetic job tree for timing, out of real lines from sample_logs/.

Every line is copied from a real run in sample_logs/ (a healthy rank's iteration line and NCCL INFO
chatter, a victim's watchdog block, the culprit's OOM traceback) and only repeated with its rank and
counters renumbered, so the scanner meets the shapes it meets in production. The tree looks like
torchrun's --log-dir layout: <out>/node<N>/run/attempt_0/<local_rank>/stderr.log.

    python benchmarks/gen_tree.py OUT --ranks 512 --mb-per-rank 1 --culprit 37
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
PREFIX = re.compile(r"^(?:\s*\d+: )?(?:\[default\d+\]:)?(?:\[rank\d+\]:)?")


def _lines(path: Path, needle: str, limit: int = 200) -> list[str]:
    found = [PREFIX.sub("", line) for line in path.read_text().splitlines() if needle in line]
    return found[:limit]


def templates() -> dict[str, list[str]]:
    ok = next((SAMPLES / "slurm-ok").glob("slurm-*.out"))
    debug = SAMPLES / "gpu-nccl-ifname-debug" / "launcher.out"
    hang = next((SAMPLES / "gpu-oom-backward-hang" / "torchrun-logs").glob("*/attempt_0/0/stderr.log"))
    culprit = next((SAMPLES / "gpu-oom-backward-exit" / "torchrun-logs").glob("*/attempt_0/1/stderr.log"))
    return {
        "iteration": _lines(ok, " iteration ", 1),
        "nccl_info": _lines(debug, "NCCL INFO"),
        "victim_tail": hang.read_text().splitlines(),
        "culprit_tail": culprit.read_text().splitlines(),
    }


def rank_file(rank: int, size: int, culprit: int, parts: dict[str, list[str]]) -> str:
    head = "\n".join(parts["nccl_info"]) + "\n"
    line = parts["iteration"][0]
    body: list[str] = []
    total, step = len(head), 0
    while total < size:
        step += 1
        text = re.sub(r"iteration\s+\d+", f"iteration {step:8d}", line)
        body.append(text)
        total += len(text) + 1
    tail = parts["culprit_tail"] if rank == culprit else parts["victim_tail"]
    tail = [re.sub(r"\[rank\d+\]", f"[rank{rank}]", t).replace("Rank 0]", f"Rank {rank}]") for t in tail]
    return head + "\n".join(body) + "\n" + "\n".join(tail) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=512)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--mb-per-rank", type=float, default=1.0)
    parser.add_argument("--culprit", type=int, default=37)
    args = parser.parse_args()
    parts = templates()
    size = int(args.mb_per_rank * 2**20)
    for rank in range(args.ranks):
        node, local = divmod(rank, args.per_node)
        target = args.out / f"node{node}" / "run" / "attempt_0" / str(local) / "stderr.log"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rank_file(rank, size, args.culprit, parts))
    print(f"{args.ranks} ranks x {args.mb_per_rank} MiB under {args.out}")


if __name__ == "__main__":
    main()
