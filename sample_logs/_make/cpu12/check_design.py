#!/usr/bin/env python3
"""Check that each design.json root line occurs verbatim in some log of $RESULTS/cpu12-<scenario>/.
Lines with pids/ports/byte counts (killed, port, oom, shape, data) can change after a re-run; update them."""
import json
import os
import sys

R = os.environ.get("RESULTS", "/tmp/cpu12-results")
design = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "design.json")))
bad = 0
for name, v in design.items():
    hits = []
    for root, _, files in os.walk(os.path.join(R, f"cpu12-{name}")):
        for f in files:
            with open(os.path.join(root, f), errors="replace") as fh:
                if v["root"] in fh.read():
                    hits.append(os.path.relpath(os.path.join(root, f), R))
    bad += not hits
    print(f"{name:11s} {v['category']:10s} rank={v['rank']!s:5s} {'ok  ' if hits else 'MISSING'} {hits[:2]}")
sys.exit(1 if bad else 0)
