"""Minimal `accelerate launch`-style wrapper around torchrun.

    python launch.py --num-processes 2 [--gpu-ids 0,1] [--main-process-port 29500] finetune.py --config cfg.json
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import subprocess
import sys

logger = logging.getLogger("launch")


def launch_command_parser():
    parser = argparse.ArgumentParser("launch", description="Launch a training script on one machine")
    parser.add_argument("--num-processes", "--num_processes", type=int, default=None)
    parser.add_argument("--num-machines", "--num_machines", type=int, default=None)
    parser.add_argument("--machine-rank", "--machine_rank", type=int, default=0)
    parser.add_argument("--main-process-ip", "--main_process_ip", default=None)
    parser.add_argument("--main-process-port", "--main_process_port", type=int, default=None)
    parser.add_argument("--gpu-ids", "--gpu_ids", default=None, help="comma separated GPU ids to use")
    parser.add_argument("--mixed-precision", "--mixed_precision", default=None, choices=["no", "fp16", "bf16"])
    parser.add_argument("--monitor-interval", "--monitor_interval", type=float, default=0.1)
    parser.add_argument("training_script")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser


def _defaults_warning(args):
    missing = []
    if args.num_processes is None:
        missing.append("\t`--num_processes` was set to a value of `1`")
        args.num_processes = 1
    if args.num_machines is None:
        missing.append("\t`--num_machines` was set to a value of `1`")
        args.num_machines = 1
    if args.mixed_precision is None:
        missing.append("\t`--mixed_precision` was set to a value of `'no'`")
        args.mixed_precision = "no"
    if missing:
        print(
            "The following values were not passed to `launch` and had defaults used instead:\n"
            + "\n".join(missing)
            + "\nTo avoid this warning pass in values for each of the problematic parameters or run `launch config`.",
            file=sys.stderr,
        )


def _kernel_check():
    if platform.system() != "Linux":
        return
    release = platform.release().split("-")[0]
    try:
        parts = tuple(int(x) for x in release.split(".")[:2])
    except ValueError:
        return
    if parts < (5, 5):
        logger.warning(
            "Detected kernel version %s, which is below the recommended minimum of 5.5.0; this can cause the "
            "process to hang. It is recommended to upgrade the kernel to the minimum version or higher.",
            release,
        )


def prepare_multi_gpu_env(args):
    env = os.environ.copy()
    if args.gpu_ids is not None and args.gpu_ids != "all":
        env["CUDA_VISIBLE_DEVICES"] = args.gpu_ids
    env["ACCELERATE_MIXED_PRECISION"] = str(args.mixed_precision)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def multi_gpu_launcher(args):
    env = prepare_multi_gpu_env(args)
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    cmd += ["--nnodes", str(args.num_machines), "--node-rank", str(args.machine_rank)]
    cmd += ["--nproc-per-node", str(args.num_processes)]
    if args.main_process_ip:
        cmd += ["--master-addr", args.main_process_ip]
    if args.main_process_port:
        cmd += ["--master-port", str(args.main_process_port)]
    cmd += ["--monitor-interval", str(args.monitor_interval)]
    cmd += [args.training_script] + list(args.training_script_args)
    process = subprocess.run(cmd, env=env, check=True)
    return process.returncode


def simple_launcher(args):
    env = prepare_multi_gpu_env(args)
    cmd = [sys.executable, args.training_script] + list(args.training_script_args)
    process = subprocess.run(cmd, env=env, check=True)
    return process.returncode


def launch_command(args):
    _defaults_warning(args)
    _kernel_check()
    if args.num_processes > 1 or args.num_machines > 1:
        multi_gpu_launcher(args)
    else:
        simple_launcher(args)


def main():
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s:%(name)s:%(message)s")
    parser = launch_command_parser()
    args = parser.parse_args()
    launch_command(args)


if __name__ == "__main__":
    main()
