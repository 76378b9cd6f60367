#!/usr/bin/env python3
"""Check that every result folder exists, holds logs, and that design.json's root line appears verbatim
(after stripping ANSI colours and Ray's '(Actor pid=N) ' prefix) in one of its files."""
import json, os, re, sys
here = os.path.dirname(os.path.abspath(__file__))
results = os.environ.get("RESULTS", "/tmp/cpu15-results")
design = json.load(open(os.path.join(here, "..", "design.json")))
ansi = re.compile(r"\x1b\[[0-9;]*m")
prefix = re.compile(r"^\([A-Za-z_]+(?: pid=\d+(?:, ip=[\d.]+)?)?\) ")
bad = 0
for sc, e in design.items():
    d = os.path.join(results, f"cpu15-{sc}")
    files = [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs] if os.path.isdir(d) else []
    found = e["root"] is None
    for f in files:
        for line in open(f, errors="replace"):
            line = prefix.sub("", ansi.sub("", line)).rstrip("\n")
            if e["root"] is not None and line.strip() == e["root"]:
                found = True
    ok = bool(files) and found
    bad += not ok
    print(f"{'OK ' if ok else 'BAD'} {sc:22s} files={len(files):3d} root={'(none)' if e['root'] is None else 'found' if found else 'MISSING'}")
sys.exit(1 if bad else 0)
