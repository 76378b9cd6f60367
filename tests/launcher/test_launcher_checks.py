"""Preflight: every failure names what to change."""

from __future__ import annotations

import socket
from pathlib import Path

from launcher import checks
from launcher.spec import JobSpec

MOUNTS = """\
/dev/vda / ext4 rw 0 0
tmpfs /tmp tmpfs rw 0 0
fs:/lustre /lustre lustre rw 0 0
nfs:/home /home nfs4 rw 0 0
"""


def _errors(findings):
    return {f.check: f.message for f in findings if f.level == "error"}


def test_world_size_must_divide_by_tp_pp_cp():
    found = _errors(checks.parallelism(JobSpec(nodes=3, gpus_per_node=8, tp=4, pp=4)))
    assert "WORLD_SIZE 24" in found["world-size"] and "TP x PP x CP = 4 x 4 x 1 = 16" in found["world-size"]
    assert "change nodes/gpus_per_node to a multiple of 16" in found["world-size"]
    assert not checks.parallelism(JobSpec(nodes=4, gpus_per_node=8, tp=4, pp=2, cp=2))


def test_heads_must_divide_by_tp():
    found = _errors(checks.parallelism(JobSpec(tp=8, args=("--num-attention-heads", "12"))))
    assert "num_attention_heads 12 is not divisible by TP 8: use tp in [1, 2, 3, 4, 6]" in found["heads"]


def test_nproc_must_equal_gpus_per_node_and_visible_gpus():
    assert "nproc" in _errors(checks.parallelism(JobSpec(gpus_per_node=8, nproc_per_node=4)))
    found = _errors(checks.gpus(JobSpec(gpus_per_node=8), {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}))
    assert "sees 4 GPU(s) but nproc_per_node is 8: set gpus_per_node = 4" in found["gpus"]
    assert not checks.gpus(JobSpec(gpus_per_node=4), {"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert not checks.gpus(JobSpec(gpus_per_node=0, nproc_per_node=2), {})


def test_filesystem_type_takes_the_longest_mount_point():
    assert checks.filesystem_type(Path("/lustre/me/megatron"), MOUNTS) == "lustre"
    assert checks.filesystem_type(Path("/tmp/x"), MOUNTS) == "tmpfs"
    assert checks.filesystem_type(Path("/opt"), MOUNTS) == "ext4"


def test_node_local_worktree_is_an_error_for_multi_node_jobs(worktree: Path):
    repo = Path("/usr")  # exists everywhere and is not under a node-local prefix (CI may clone into /tmp)
    multi = JobSpec(nodes=2)
    found = checks.placement(repo, "worktree", multi, f"tmpfs {repo} tmpfs rw 0 0\n")
    assert found[0].level == "error" and "node-local (tmpfs)" in found[0].message
    assert "move it to a shared filesystem" in found[0].message
    assert checks.placement(repo, "worktree", multi, f"fs:/x {repo} lustre rw 0 0\n") == []
    assert checks.placement(repo, "worktree", multi, f"/dev/sda {repo} ext4 rw 0 0\n")[0].level == "warning"
    by_path = checks.placement(worktree, "worktree", multi, MOUNTS)  # pytest's tmp_path lives under /tmp
    assert by_path[0].level == "error"
    single = JobSpec(nodes=2, single_host_nodes=True)  # one machine: nothing to share with
    assert checks.placement(worktree, "worktree", single, MOUNTS)[0].level == "warning"


def test_missing_venv_and_entry_point_say_how_to_fix(tmp_path: Path):
    spec = JobSpec(worktree=str(tmp_path), entry="pretrain_gpt.py")
    found = _errors(checks.files(spec, MOUNTS))
    assert "python -m venv" in found["venv"]
    assert "entry point pretrain_gpt.py not found" in found["entry"]
    (tmp_path / "uv.lock").write_text("")
    assert "run `uv sync`" in _errors(checks.files(spec, MOUNTS))["venv"]


def test_a_good_worktree_passes(worktree: Path):
    spec = JobSpec(worktree=str(worktree), entry="train_fail.py", gpus_per_node=0, nproc_per_node=2, gpu="none")
    assert not _errors(checks.files(spec, MOUNTS))


def test_busy_port_is_reported():
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        busy = sock.getsockname()[1]
        found = _errors(checks.port(busy, "error"))
    assert f"MASTER_PORT {busy} is already in use" in found["port"] and "master_port = 'auto'" in found["port"]
    assert checks.port(None, "error") == []
