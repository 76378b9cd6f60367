#!/usr/bin/env python3
"""After a run: check every result folder has logs and that design.json's root occurs verbatim in them.

    python3 sample_logs/_make/gpu14/check_roots.py [RESULTS]      (default /tmp/gpu14-results)

For a root that is not found (predicted ones), print the candidate error lines of that folder, prefixes
such as [rank1]: / [default0]: stripped, so the real line can be copied into design.json.
"""
import gzip
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = re.compile(r"^(?:\[(?:default|trainer|rank)\d+\]:\s?)+")
CAND = re.compile(r"(Error|Exception|Assertion|Unsupported|error:|Timed out|Signal \d+)")


def lines_of(folder):
    for root, _, files in os.walk(folder):
        for f in sorted(files):
            p = os.path.join(root, f)
            opener = gzip.open if f.endswith(".gz") else open
            with opener(p, "rt", errors="replace") as fh:
                for i, line in enumerate(fh, 1):
                    yield os.path.relpath(p, folder), i, PREFIX.sub("", line.rstrip("\n"))


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpu14-results"
    design = json.load(open(os.path.join(HERE, "design.json")))
    bad = 0
    for name, d in design.items():
        folder = os.path.join(results, f"gpu14-{name}")
        if not os.path.isdir(folder):
            print(f"MISSING  {name}: no folder")
            bad += 1
            continue
        lines = list(lines_of(folder))
        root = d.get("root")
        if not lines:
            print(f"EMPTY    {name}")
            bad += 1
        elif root is None:
            print(f"OK       {name}: no root line expected ({len(lines)} lines)")
        elif any(root in text for _, _, text in lines):
            print(f"OK       {name}: root found")
        else:
            bad += 1
            print(f"NOTFOUND {name}{' (predicted)' if d.get('root_predicted') else ''}: {root[:100]}")
            seen = set()
            for f, i, text in lines:
                t = text.strip()
                if CAND.search(t) and t not in seen and not t.startswith("File "):
                    seen.add(t)
                    print(f"    {f}:{i}: {t[:300]}")
                    if len(seen) >= 12:
                        break
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
