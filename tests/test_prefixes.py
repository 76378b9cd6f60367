"""Launcher prefixes come off and their identity is kept apart: global rank, local rank, srun task, host.

Every line below is copied from a real log in sample_logs/ (the folder is named beside it) or, for the
formats no sample has yet, from the public thread named beside it.
"""

from __future__ import annotations

import pytest

from diagnose.prefixes import split_prefix

QWEN_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 132.00 MiB. GPU 3 has a total capacity"
    " of 79.10 GiB of which 98.00 MiB is free. Process 387746 has 78.89 GiB memory in use. Of the allocat"
    "ed memory 70.12 GiB is allocated by PyTorch, and 765.81 MiB is reserved by PyTorch but unallocated. "
    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:"
    "True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
IDX = "FileNotFoundError: [Errno 2] No such file or directory: '/work/guanhua/dataset/index-cache/43d5bc1477867ae12d66da383c2b664b_doc_idx.npy'"
DIFFSYNTH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.30 GiB. GPU 4 has a total capacity o"
    "f 94.99 GiB of which 861.06 MiB is free. Including non-PyTorch memory, this process has 94.14 GiB me"
    "mory in use. Of the allocated memory 85.75 GiB is allocated by PyTorch, and 3.97 GiB is reserved by "
    "PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_"
    "CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (htt"
    "ps://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
CASES = [
    # (line, rank, local_rank, task, host, text)
    (
        "1: [default2]:[rank6]: RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x20 and 16x32)",
        6,
        2,
        1,
        None,
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x20 and 16x32)",
    ),  # slurm-shape-second-node
    (
        "[default1]:[rank1]:[E1129 19:02:21.049847761 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective "
        "operation timeout: x",
        1,
        1,
        None,
        None,
        "[Rank 1] Watchdog caught collective operation timeout: x",
    ),  # gpu-desync
    (
        "c000001: FileNotFoundError: [Errno 2] No such file or directory: 'x.npy'",
        None,
        None,
        None,
        "c000001",
        "FileNotFoundError: [Errno 2] No such file or directory: 'x.npy'",
    ),  # public-pdsh-megatron-index-cache-missing
    (
        "slurmstepd-vm: error: *** JOB 3 ON vm CANCELLED AT 2026-11-29T18:53:51 DUE TO TIME LIMIT ***",
        None,
        None,
        None,
        None,
        "slurmstepd-vm: error: *** JOB 3 ON vm CANCELLED AT 2026-11-29T18:53:51 DUE TO TIME LIMIT ***",
    ),  # slurm-time-limit
    (
        "[2025-11-25 10:54:43,191] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -8)",
        None,
        None,
        None,
        None,
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -8)",
    ),  # public-torchrun-sigfpe-local-rank1
    (
        "2024-11-20 14:37:16 [rank3]: torch.OutOfMemoryError: CUDA out of memory.",
        3,
        None,
        None,
        None,
        "torch.OutOfMemoryError: CUDA out of memory.",
    ),  # https://github.com/QwenLM/Qwen3-Coder/issues/174
    (
        "dinov2-giant-nodes.cn-d004 [stderr] [rank14]:[E909 09:55:29.307629539 ProcessGroupNCCL.cpp:607] [Rank 14] W",
        14,
        None,
        None,
        "dinov2-giant-nodes.cn-d004",
        "[Rank 14] W",
    ),  # public-hang-multinode-wrapped-reduce
    (
        "train.py: error: unrecognized arguments: --local_rank=3",
        None,
        None,
        None,
        None,
        "train.py: error: unrecognized arguments: --local_rank=3",
    ),  # argparse naming the script
    (
        "[1,mpirank:3,algo-1]<stderr>:Traceback (most recent call last):",
        3,
        None,
        None,
        "algo-1",
        "Traceback (most recent call last):",
    ),  # SageMaker MPI tag-output
    (
        "[2024-04-18 19:10:41] CRITICAL [olmo.util:158, rank=0] Uncaught OLMoThreadError: generator thread data thread 3 failed",
        0,
        None,
        None,
        None,
        "Uncaught OLMoThreadError: generator thread data thread 3 failed",
    ),  # public-olmo-train-data-generator-thread-failed-rank0: OLMo's logging header
    (
        "[2025-02-24 14:09:34 TP14] Scheduler hit an exception: Traceback (most recent call last):",
        14,
        None,
        None,
        None,
        "Scheduler hit an exception: Traceback (most recent call last):",
    ),  # public-sglang-2node-nccl-bootstrap-no-route-to-host-tp14: SGLang's per-process header
    (
        "[rank0]:[rank0]: Traceback (most recent call last):",
        0,
        0,
        None,
        None,
        "Traceback (most recent call last):",
    ),  # gpu-filtered-shape-exit: torchrun --role rank labels the local rank, torch's own prefix the global one
    (
        "0: slurmstepd-vm: error: *** STEP 88.0 ON vm CANCELLED AT 2026-11-30T03:52:36 DUE TO TIME LIMIT ***",
        None,
        None,
        None,
        None,
        "slurmstepd-vm: error: *** STEP 88.0 ON vm CANCELLED AT 2026-11-30T03:52:36 DUE TO TIME LIMIT ***",
    ),  # slurm-srun-per-rank-time-limit: slurmstepd's message under task 0's label is not task 0's output
    (
        "[2023-06-06T22:43:59.394824Z] e97cfa1e || TypeError: evaluate() got an unexpected keyword argument 'save_best'",
        None,
        None,
        None,
        None,
        "TypeError: evaluate() got an unexpected keyword argument 'save_best'",
    ),  # public-determined-mmdet-model-hub-evaluate-unexpected-kwarg-save-best: an exported trial log, no rank field
    (
        "main_train/0 [1]:RuntimeError: unique_by_key: failed on 2nd step: cudaErrorIllegalAddress: an illegal memory "
        "access was encountered",
        None,
        1,
        None,
        None,
        "RuntimeError: unique_by_key: failed on 2nd step: cudaErrorIllegalAddress: an illegal memory access was "
        "encountered",
    ),  # public-torchrec-nvt-backward-illegal-address-rank1: TorchX's role/replica, torchrun's local rank
    (
        "rank4]: " + DIFFSYNTH_OOM,
        4,
        None,
        None,
        None,
        DIFFSYNTH_OOM,
    ),  # public-diffsynth-wan21-t2v-14b-lora-720p-8xh100-oom-rank4-one-line: the paste lost the first bracket
    (
        "2026-12-01 03:57:40,832 | INFO    | rank1 | lmtrain.trainer:152 - token budget reached (16316 >= 16000) at step 6",
        1,
        None,
        None,
        None,
        "lmtrain.trainer:152 - token budget reached (16316 >= 16000) at step 6",
    ),  # gpu11-token-budget-hang: loguru-style columns after the time
    (
        "[1] tensorflow.python.framework.errors_impl.UnknownError: ncclCommInitRank failed: unhandled cuda error",
        1,
        None,
        None,
        None,
        "tensorflow.python.framework.errors_impl.UnknownError: ncclCommInitRank failed: unhandled cuda error",
    ),  # public-deepmd-horovodrun-2gpu-broadcast-ncclcomminitrank-cuda-error-rank1: horovodrun's bare rank tag
    (
        "[56] crow-ib-new-nccl-262-b-7:7240:7401 [0] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed "
        "with error Invalid argument",
        56,
        None,
        None,
        "crow-ib-new-nccl-262-b-7",
        "misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error Invalid argument",
    ),  # known-gaps/public-nccl-262-mixed-ib-roce-ibv-modify-qp-invalid-argument-rank56: the tag before NCCL's header
    (
        "[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
        None,
        None,
        None,
        None,
        "[3] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
    ),  # public-kubeflow-tf-nccl-shm-posix-fallocate-no-space: NCCL's header cut to its device
    (
        "[82362] Signal: Segmentation fault (11)",
        None,
        None,
        None,
        None,
        "[82362] Signal: Segmentation fault (11)",
    ),  # public-pytorch-mpi-backend-openmpi-segfault-handler: Open MPI's handler tags its lines with the pid
    (
        "[g2-nasp:24252] *** MPI_ERR_ROOT: invalid root",
        None,
        None,
        None,
        "g2-nasp",
        "*** MPI_ERR_ROOT: invalid root",
    ),  # public-mpi-backend-two-node-reduce-mpi-err-root-rank0: Open MPI's `[host:pid]` on its error block
    (
        "I1201 06:43:10.862 597 [1/2] engine.py:166] training from step 0 to 60, 2 ranks, batch 64/rank, precision bf16",
        1,
        None,
        None,
        None,
        "training from step 0 to 60, 2 ranks, batch 64/rank, precision bf16",
    ),  # gpu13-label-range-assert (node1.log): a trainer's glog-style header with rank/world after the pid
]


@pytest.mark.parametrize(("line", "rank", "local", "task", "host", "text"), CASES)
def test_prefix_identity(line, rank, local, task, host, text):
    prefix, rest = split_prefix(line)
    assert (prefix.rank, prefix.local_rank, prefix.task, prefix.host, rest) == (rank, local, task, host, text)
