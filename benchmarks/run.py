"""Time `diagnose` against ripgrep on the same files, in one run, and check the verdict.

ripgrep gets exactly the prefilter expressions diagnose's scanner uses (the relaxed form of every
signature plus the structural anchors), with line numbers, so both read every byte and report the same
candidate lines; diagnose then does its real work (tracebacks, ranks, decision, report) on top.

    python benchmarks/gen_tree.py /tmp/t1g --ranks 512 --mb-per-rank 2
    python benchmarks/run.py /tmp/t1g --expect-rank 37
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diagnose.api import load_library
from diagnose.scan import _prefilter_expression


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _time(cmd: list[str], runs: int) -> tuple[float, bytes]:
    subprocess.run(cmd, capture_output=True, check=False)  # warm the page cache and the interpreter
    times, out = [], b""
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, check=False).stdout  # piped: rg must not stop early
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def rg_command(root: Path, pattern_file: Path) -> list[str]:
    rg = shutil.which("rg") or str(Path(sys.executable).parent / "rg")
    return [rg, "-n", "--no-heading", "-j2", "-f", str(pattern_file), str(root)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--expect-rank", type=int, default=None)
    args = parser.parse_args()

    library = load_library()
    expressions = [_prefilter_expression(p.regex) for p in library.patterns]
    expressions += [_prefilter_expression(a) for a in library.scanner.anchors.values()]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(expressions) + "\n")
    size = _tree_bytes(args.tree)

    diagnose_s, report = _time([sys.executable, "-m", "diagnose.cli", str(args.tree), "--format", "json"], args.runs)
    rg_s, _ = _time(rg_command(args.tree, Path(handle.name)), args.runs)
    verdict = json.loads(report)["verdict"]
    result = {
        "bytes": size,
        "files": sum(1 for p in args.tree.rglob("*") if p.is_file()),
        "diagnose_s": round(diagnose_s, 3),
        "ripgrep_s": round(rg_s, 3),
        "ratio": round(diagnose_s / rg_s, 2),
        "diagnose_MB_s": round(size / diagnose_s / 1e6, 1),
        "verdict": [verdict["category"], verdict["rank"]],
    }
    print(json.dumps(result))
    if args.expect_rank is not None and verdict["rank"] != args.expect_rank:
        sys.exit(f"wrong verdict: expected rank {args.expect_rank}, got {verdict}")


if __name__ == "__main__":
    main()
