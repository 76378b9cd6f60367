"""The per-node wrapper: rank maps, manifest merging, and a real (tiny) command run through it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from diagnose.discover import discover
from launcher import run


def test_flag_values_in_both_spellings():
    cmd = ["python", "-m", "torch.distributed.run", "--nproc-per-node=4", "--master-port", "29501"]
    assert run.flag_value(cmd, "--nproc-per-node") == "4"
    assert run.flag_value(cmd, "--master-port") == "29501"
    assert run.flag_value(cmd, "--nnodes") is None


def test_static_rendezvous_numbers_ranks_node_by_node():
    assert run.local_to_global(1, 4) == {"0": 4, "1": 5, "2": 6, "3": 7}


def test_run_node_records_the_command_exit_code_and_merges_the_manifest(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MASTER_ADDR", "node-a")
    monkeypatch.setenv("MASTER_PORT", "29777")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    job = tmp_path / "logs" / "77"
    node_dir = job / "1-node-b"
    fake_tree = node_dir / "run_x" / "attempt_0" / "1"
    script = f"import pathlib,sys; pathlib.Path({str(fake_tree)!r}).mkdir(parents=True); sys.exit(3)"
    command = [sys.executable, "-c", script, "--nproc-per-node=2"]
    assert run.run_node(1, node_dir, command) == 3
    (fake_tree / "stderr.log").write_text("boom\n")
    manifest = json.loads((job / "manifest.json").read_text())
    assert manifest["schema"] == "launcher-manifest/1" and manifest["job_id"] == "77"
    (node,) = manifest["nodes"]
    assert node["node_rank"] == 1 and node["log_dir"] == "1-node-b"
    assert node["local_to_global"] == {"0": 2, "1": 3}
    assert (node["master_addr"], node["master_port"], node["exit_code"], node["attempts"]) == ("node-a", 29777, 3, 1)
    assert node["command"] == command and node["start"] <= node["end"]
    # diagnose reads it: the local-rank-1 file becomes global rank 3
    (found,) = [f for f in discover([str(job)]).files if f.path.name == "stderr.log"]
    assert (found.rank, found.local_rank) == (3, 1)


def test_merge_keeps_every_node_and_ignores_half_written_ones(tmp_path: Path):
    for rank, host in ((1, "b"), (0, "a")):
        (tmp_path / f"{rank}-{host}").mkdir()
        record = {"node_rank": rank, "host": host, "log_dir": f"{rank}-{host}", "local_to_global": {"0": rank}}
        run.write_json(tmp_path / f"{rank}-{host}" / run.NODE_FILE, record)
    (tmp_path / "2-c").mkdir()
    (tmp_path / "2-c" / run.NODE_FILE).write_text("{not json")
    manifest = json.loads(run.merge_manifest(tmp_path, {"SLURM_JOB_ID": "5"}).read_text())
    assert [n["host"] for n in manifest["nodes"]] == ["a", "b"] and manifest["hosts"] == ["a", "b"]
    assert manifest["world_size"] == 2
