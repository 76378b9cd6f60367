"""The rendered sbatch script follows the seed guide exactly, and passes bash -n and shellcheck."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from launcher.sbatch import cuda_device_max_connections, render
from launcher.spec import JobSpec, loads

# The seed's CUDA_DEVICE_MAX_CONNECTIONS rules, one row each:
# (gpu, tp, cp, fsdp, moe_overlap) -> value (None = must stay unset)
CDMC_TABLE = [
    ("hopper", 2, 1, "none", False, "1"),  # pre-Blackwell and TP>1 and not FSDP
    ("ampere", 1, 2, "none", False, "1"),  # pre-Blackwell and CP>1 and not FSDP
    ("hopper", 1, 1, "none", False, None),  # no TP/CP overlap: never export it unconditionally
    ("blackwell", 8, 2, "none", False, None),  # Blackwell/GB200: not needed
    ("hopper", 4, 1, "torch", False, None),  # Torch-FSDP2: must not be 1
    ("hopper", 4, 1, "megatron", False, None),  # Megatron-FSDP: must not be 1
    ("hopper", 4, 1, "none", True, "32"),  # overlap_moe_expert_parallel_comm: 32
    ("blackwell", 1, 1, "megatron", True, "32"),  # MoE overlap wins everywhere
    ("none", 4, 1, "none", False, None),  # no GPUs
]


@pytest.mark.parametrize(("gpu", "tp", "cp", "fsdp", "moe", "expected"), CDMC_TABLE)
def test_cuda_device_max_connections_follows_the_seed(gpu, tp, cp, fsdp, moe, expected):
    spec = JobSpec(gpu=gpu, tp=tp, cp=cp, fsdp=fsdp, moe_overlap=moe)
    value, why = cuda_device_max_connections(spec)
    assert value == expected
    assert why  # the reason goes into the script as a comment
    script = render(spec)
    if expected is None:
        assert "export CUDA_DEVICE_MAX_CONNECTIONS" not in script
        assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in script
    else:
        assert f"export CUDA_DEVICE_MAX_CONNECTIONS={expected}\n" in script
    assert f"# CUDA_DEVICE_MAX_CONNECTIONS: {why}" in script


SPEC = """
name = "gpt"
nodes = 4
gpus_per_node = 8
partition = "batch"
account = "llm"
entry = "pretrain_gpt.py"
args = ["--num-attention-heads", "32", "--data-path", "/lustre/my data/text_document"]
tp = 2
worktree = "/lustre/megatron"
"""


def test_script_has_the_seed_skeleton():
    script = render(loads(SPEC))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for line in (
        "#SBATCH --job-name=gpt",
        "#SBATCH --account=llm",
        "#SBATCH --partition=batch",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --output=/lustre/megatron/logs/%x-%j.out",
        "#SBATCH --error=/lustre/megatron/logs/%x-%j.err",
        "set -euo pipefail",
        "cd /lustre/megatron",
        "export NNODES=${SLURM_NNODES}",
        "export WORLD_SIZE=$((NNODES * GPUS_PER_NODE))",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "export MASTER_PORT=29500",
        "  NODE_RANK=${SLURM_NODEID}",
    ):
        assert line in lines, line
    assert lines.index("set -euo pipefail") < lines.index("cd /lustre/megatron")
    assert re.search(r"^export GPUS_PER_NODE=8\b", script, re.M)


def test_one_srun_task_per_node_running_torch_distributed_run_with_all_five_flags():
    script = render(loads(SPEC))
    srun = [line for line in script.splitlines() if line.startswith("srun ")]
    assert len(srun) == 1 and '--ntasks="$NNODES"' in srun[0] and "--ntasks-per-node=1" in srun[0]
    assert not re.search(r"^[^#]*\btorchrun\b", script, re.M)  # python -m torch.distributed.run, never torchrun
    launch = script.split("-m torch.distributed.run", 1)[1]
    for flag in ("--nnodes=", "--nproc-per-node=", "--node-rank=", "--master-addr=", "--master-port="):
        assert launch.count(flag) == 1, flag
    assert '--log-dir="$NODE_DIR" --redirects=3 --tee=3' in script
    assert 'NODE_DIR="$LAUNCHER_JOB_DIR/${NODE_RANK}-$(hostname -s)"' in script
    assert "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[${role_name}${local_rank}]:[rank${rank}]:'" in script


def test_uv_worktree_runs_through_uv_run(tmp_path: Path):
    (tmp_path / "uv.lock").write_text("")
    script = render(JobSpec(worktree=str(tmp_path)))
    assert "uv run python -m torch.distributed.run" in script


def test_port_derived_from_job_id_and_containers():
    spec = loads(SPEC, ['master_port="auto"', 'container={kind="pyxis", image="nvcr.io/nvidia/pytorch:25.09-py3"}'])
    script = render(spec)
    assert "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))" in script
    assert "--container-image=nvcr.io/nvidia/pytorch:25.09-py3" in script
    sing = render(loads(SPEC, ['container={kind="singularity", image="/lustre/img.sif", mounts=["/lustre"]}']))
    assert "singularity exec --nv --bind /lustre /lustre/img.sif" in sing


def test_single_host_nodes_packs_node_tasks_on_one_machine():
    script = render(loads(SPEC, ["single_host_nodes=true", "nodes=2"]))
    assert "#SBATCH --nodes=1" in script and "#SBATCH --ntasks=2" in script
    assert "export NNODES=2" in script and "NODE_RANK=${SLURM_PROCID}" in script


SCRIPTS = {
    "megatron": [],
    "uv-auto-port-pyxis": ['master_port="auto"', 'container={kind="pyxis", image="img", mounts=["/a:/a", "/b:/b"]}'],
    "singularity-moe-fsdp": ['container={kind="singularity", image="x.sif"}', "moe_overlap=true", 'fsdp="torch"'],
    "cpu-single-host": ["gpus_per_node=0", "nproc_per_node=2", "single_host_nodes=true", 'gpu="none"', "args=[]"],
    "quotes-everywhere": ['args=["--name", "it\'s a $HOME `x`"]', 'env={A="b c", B="$(rm -rf /)"}'],
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_rendered_scripts_pass_bash_n_and_shellcheck(name, tmp_path: Path):
    path = tmp_path / f"{name}.sbatch"
    path.write_text(render(loads(SPEC, SCRIPTS[name])))
    subprocess.run(["bash", "-n", str(path)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (tests/run.sh installs it)")
    done = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_arguments_reach_the_entry_point_unchanged(tmp_path: Path):
    """Run the script's argument plumbing with srun/launcher stubbed: the entry sees the exact argv."""
    args = ["--name", "it's a $HOME `x`", "--empty", ""]
    spec = JobSpec(worktree=str(tmp_path), args=tuple(args), gpus_per_node=0, nproc_per_node=1, gpu="none")
    script = render(spec)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "srun").write_text('#!/bin/bash\nwhile [[ $1 == -* ]]; do shift; done\nSLURM_NODEID=0 exec "$@"\n')
    (stubs / "scontrol").write_text("#!/bin/bash\necho node1\n")
    (stubs / "py").write_text(
        '#!/bin/bash\nif [[ $2 == launcher && $3 == run-node ]]; then shift 6; printf "%s\\n" "$@" > argv.txt; fi\n'
    )
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    script = script.replace(f"LAUNCHER_PYTHON={spec.launcher_python}", f"LAUNCHER_PYTHON={stubs / 'py'}")
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "n1"}
    subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, check=True)
    argv = (tmp_path / "argv.txt").read_text().split("\n")[:-1]
    assert argv[argv.index(spec.entry) + 1 :] == args
    assert "--node-rank=0" in argv and "--master-addr=node1" in argv and "--master-port=29500" in argv


def test_example_spec_renders_a_clean_script(tmp_path: Path):
    example = Path(__file__).parents[2] / "launcher" / "examples" / "gpt.toml"
    from launcher.spec import load

    script = render(load(example))
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in script  # hopper, TP=4, no FSDP
    path = tmp_path / "gpt.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)
    if shutil.which("shellcheck"):
        subprocess.run(["shellcheck", "-s", "bash", str(path)], check=True)
