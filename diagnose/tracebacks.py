"""Rebuild Python tracebacks and torchrun failure summaries around the hits the scanner found.

Only the lines after an anchor are read (a window), and only those written by the same writer as the
anchor (same prefix identity), so tracebacks of several ranks interleaved in one SLURM file come apart
again. Plain, chained and rich (box-drawn) tracebacks are handled; torchrun's ChildFailedError block is
turned into per-rank exit records (rank, local rank, host, exit code, signal, time).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace

import regex

from diagnose.prefixes import EMPTY, Prefix, split_prefix
from diagnose.readers import encodable

WINDOW_BYTES = 1 << 18
WINDOW_LINES = 600
BACK_BYTES = 1 << 15  # looking back for frames above a headerless exception line
_FRAME = regex.compile(r'\s*File "(?P<path>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?')
_RICH_FRAME = regex.compile(r"[│|]\s*(?P<path>\S+?\.py):(?P<line>\d+) in (?P<func>\S+)")
_EXCEPTION = regex.compile(r"(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_FAILURE_HEADER = regex.compile(r"\[(?P<index>\d+)\]:\s*")
_FAILURE_FIELD = regex.compile(r"\s*(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<value>.*)")
_RANK_FIELD = regex.compile(r"(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)")
_EXIT_FIELD = regex.compile(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
_BLOCK_TEXT = ("Failures:", "<NO_OTHER_FAILURES>", "torch.distributed.elastic", "ChildFailedError", "raise ")
_SIGNAL = regex.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\)")


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    func: str


@dataclass(frozen=True)
class Traceback:
    start_line: int
    exception_line: int | None
    prefix: Prefix
    frames: tuple[Frame, ...]
    exception: str | None
    exc_type: str | None
    source: str | None = None  # the code line printed under the innermost frame

    @property
    def user_frame(self) -> Frame | None:
        """Innermost frame outside installed packages: where a person would start reading."""
        return _innermost_own(self.frames) if self.frames else None


_INSTALLED = regex.compile(r"site-packages|dist-packages|/lib/python3")
_BACKWARD = ("backward", "_engine_run_backward", "run_backward")
_INIT = (
    "init_process_group",
    "barrier",
    "new_group",
    "_new_group_with_tag",
    "init_device_mesh",
    "initialize_model_parallel",
    "_store_based_barrier",
    "_verify_params_across_processes",
)


# where ranks find each other (TCPStore, the env:// / tcp:// handlers, torchelastic's rendezvous): a plain
# `RuntimeError: Connection timed out` raised there is the network between the nodes, not the training code
_RENDEZVOUS = (
    "_env_rendezvous_handler",
    "_tcp_rendezvous_handler",
    "_create_c10d_store",
    "_create_tcp_store",
    "next_rendezvous",
    "_rendezvous",
)

# functions that restore a saved run: `load_checkpoint`, `check_ckpt_list`, accelerate's `load_state`, and the
# per-GPU RNG states a resume puts back (`set_rng_state_all`: saved with more GPUs than this run has)
# (SpeechBrain's Pretrainer loads pretrained parameter files in `load_collected`); saving: accelerate's `save_state`
_CHECKPOINT_LOAD = regex.compile(
    r"(?:load|check|read|resume)_(?:\w+_)?(?:checkpoint|ckpt|state_dict)|load_from_\w*state_dict|load_model_state"
    r"|load_(?:\w+_)?(?:pretrained|weights)\b|^load_state$|^set_rng_state_all$|^load_collected$"
)
# saving, and pruning old checkpoints as part of a save (torchtitan's _purge_stale_checkpoints, keep_latest_k)
_CHECKPOINT_SAVE = regex.compile(
    r"save_(?:\w+_)?checkpoint|^_?save_state_dict$|^save_state$"
    r"|(?:purge|remove|delete|rotate|clean_?up|prune)_(?:\w+_)?(?:checkpoints?|ckpts?)\b"
)
# a project's checkpoint module (torchtitan's components/checkpoint.py, checkpointing.py): its `save` is a save
_CHECKPOINT_MODULE = regex.compile(r"(?:^|/)(?:checkpoint(?:ing|er|s)?|ckpt\w*)\.py$")
_MODULE_SAVE = frozenset({"save", "_save", "async_save"})


_ARGUMENT_CHECKS = ("validate_args", "parse_args", "_parse_args", "check_args", "validate_arguments")
_ARGUMENT_MODULES = ("arguments.py", "args.py")
# the launcher's entry modules: an error raised in them, not deeper in the agent, is about the launch command
_LAUNCHER_ENTRY = ("torch/distributed/run.py", "torch/distributed/launch.py", "deepspeed/launcher/runner.py")
# ...except the functions that run the workers and report their failure (the old launcher raises
# CalledProcessError from its main)
_LAUNCHER_DRIVERS = ("<module>", "main", "run", "launch", "wrapper")


def _checks_arguments(frame: Frame) -> bool:
    """Argument validation: Megatron's validate_args, argparse, a config dataclass's __post_init__, anything
    raised in a project's own arguments module (SwissArmyTransformer's `sat/arguments.py: get_args`) or in
    torchrun's own entry module."""
    path = frame.path.replace("\\", "/")
    name = path.rsplit("/", 1)[-1]
    if frame.func in _ARGUMENT_CHECKS or name in _ARGUMENT_MODULES:
        return True
    if path.endswith(_LAUNCHER_ENTRY) and frame.func not in _LAUNCHER_DRIVERS:
        return True  # torchrun reading its own command line (`int(nproc_per_node)` in determine_local_world_size)
    return frame.func == "__post_init__" and any(word in name for word in ("argument", "config", "args"))


# a project's own configuration module (`sage/config.py`, `configs/base.py`, `model_config.py`): what it raises while
# reading or checking the run's settings (a config file that does not parse) is about the configuration
_CONFIG_MODULE = regex.compile(r"(?:^|/)(?:\w+_)?(?:config|configs|cfg|conf)\.py$|/configs?/[^/]+\.py$")


# (`data_parallel.py` is torch's DataParallel wrapper, not data)
_DATA_MODULE = regex.compile(
    r"/(?:data|datasets?|dataloaders?)/[^/]+\.py|/(?:data|datasets?)(?:_(?!parallel)\w+)?\.py|/[a-z]+_data\.py"
)


# installed data libraries: Hugging Face datasets (its packaged builders live in subfolders), webdataset,
# MosaicML streaming
# (torch/multiprocessing/reductions.py rebuilds the tensors a DataLoader worker sent through shared memory)
_DATA_LIBRARY = regex.compile(
    r"(?:site|dist)-packages/(?:datasets|webdataset|streaming)/|torch/multiprocessing/reductions\.py"
)


# a project's function that builds or loads its dataset (`build_dataset`, `load_train_data`, `get_shards`)
# (Alpaca-style scripts' `make_supervised_data_module` too)
_DATA_BUILDER = regex.compile(
    r"(?:build|load|get|make|create|prepare|read)_(?:\w+_)?(?:datasets?|data|shards?)(?:_(?:module|loaders?))?"
)


def _is_data_module(path: str) -> bool:
    """The innermost frame in a project's data package or data module (`llamafactory/data/aligner.py`,
    `train/dataset.py`): an error raised while reading or converting samples. Site-packages `datasets/`
    (Hugging Face's library) counts too."""
    return _DATA_MODULE.search(path.replace("\\", "/")) is not None


# a tokenizer library or a project's tokenizer module: reading a vocabulary or merges file
_TOKENIZER_MODULE = regex.compile(
    r"/(?:tiktoken|sentencepiece|tokenizers)/|/tokenization_\w+\.py$|/tokenizers?/[^/]+\.py$"
    r"|/(?:\w+_)?tokenizer\.py$|/sentencepiece\.py$"  # fairseq2's data/text/sentencepiece.py, nllb/tokenizer.py
)


def _innermost_own(frames: tuple[Frame, ...]) -> Frame:
    """The innermost frame of the project itself (not an installed package): a dataset class that called
    numpy or the filesystem is still where the data was being read."""
    return next((f for f in reversed(frames) if not _INSTALLED.search(f.path)), frames[-1])


_WRITE_MODE = regex.compile(r"""["'][wax]b?\+?["']""")


# a module-level registry in capitals indexed by a name (`DATASET_MAPPING[dataset_name]`, `MODEL_REGISTRY[arch]`),
# or a class's private one (detectron2's `DatasetCatalog._REGISTERED[name]`)
_REGISTRY_LOOKUP = regex.compile(r"\b(?:[A-Z][A-Z0-9]*_[A-Z0-9_]*|_[A-Z][A-Z0-9_]{3,})\[\s*\w+\s*\]")


def output_phase(exc_type: str | None, source: str | None) -> str | None:
    """A missing directory while opening a file for writing (`open(path, "w")`): an output path the run
    was configured with but nobody created. A KeyError looking a name up in a registry: a name given in the
    arguments or config that the project does not know."""
    if not source or not exc_type:
        return None
    name = exc_type.rsplit(".", 1)[-1]
    if name in ("FileNotFoundError", "NotADirectoryError"):
        return "output_path" if _WRITE_MODE.search(source) else None
    if name == "KeyError" and _REGISTRY_LOOKUP.search(source):
        return "arguments"
    return None


# FSDP's modules that only run to build or load a (sharded, full or optimizer) state dict
_FSDP_STATE_DICT_MODULES = ("fsdp/_optim_utils.py", "fsdp/_state_dict_utils.py")
_SHARD_CONSOLIDATION = frozenset({"consolidate_shard_weights", "gather_full_optim_state_dict"})
# converting a sharded checkpoint offline (DeepSpeed's ds_to_universal / zero_to_fp32: extract_zero_shards_stage3)
_SHARD_CONVERSION = regex.compile(r"(?:extract|convert|merge|consolidate)_(?:\w+_)?(?:shard|checkpoint|c(?:h)?kpt)")

# torchrun's agent reading the error file a worker wrote as it died (ProcessFailure.__post_init__)
_ELASTIC_ERROR_FILE = "torch/distributed/elastic/multiprocessing/errors/__init__.py"


# DeepSpeed's launchers (runner.py, launch.py) stop every worker in this function, their SIGINT/SIGTERM handler
_LAUNCHER_SIGNAL_HANDLER = "sigkill_handler"
# DeepSpeed's launchers, and torch 1.x's torch.distributed.launch, which had the same handler
_SIGNAL_HANDLING_LAUNCHERS = ("deepspeed/launcher/", "torch/distributed/launch.py")
# torchrun's agent waiting for the other nodes' agents after its workers ended (the store may be gone by then)
_AGENT_EXIT_BARRIER = "_exit_barrier"
_ELASTIC_AGENT = "torch/distributed/elastic/agent/"
# the phases of a launcher's own code that runs only once workers are dying (refine.py reads them as aftermath)
LAUNCHER_SIGNAL = "launcher_signal"  # the launcher's signal handler ran: a signal reached the launcher itself
LAUNCHER_TEARDOWN = "launcher_teardown"
LAUNCHER_ERROR_FILE = "launcher_error_file"  # torchrun's agent reading a dying worker's error file


def _launcher_teardown(frames: tuple[Frame, ...]) -> str | None:
    """The launcher's own code failing while it stopped the workers, or while it waited for the other nodes once its
    workers had ended, is aftermath. Entered from code outside the launcher (a `subprocess.wait` it was blocked in),
    DeepSpeed's handler ran because a signal reached the launcher."""
    paths = [f.path.replace("\\", "/") for f in frames]
    if any(f.func == _AGENT_EXIT_BARRIER and _ELASTIC_AGENT in path for f, path in zip(frames, paths, strict=True)):
        return LAUNCHER_TEARDOWN
    for i, (frame, path) in enumerate(zip(frames, paths, strict=True)):
        launcher = next((part for part in _SIGNAL_HANDLING_LAUNCHERS if part in path), None)
        if frame.func == _LAUNCHER_SIGNAL_HANDLER and launcher is not None:
            interrupted = i > 0 and launcher not in paths[i - 1]
            return LAUNCHER_SIGNAL if interrupted else LAUNCHER_TEARDOWN
    return None


# torch.cuda.set_device: the cut stack of a process the CUDA runtime refused its device
CUDA_DEVICE = "cuda_device"
_CUDA_INIT = "torch/cuda/__init__.py"
# the launcher blocked in waiting for its worker processes (subprocess's wait / os.waitpid)
LAUNCHER_WAIT = "launcher_wait"
_CHILD_WAITS = frozenset({"waitpid", "_try_wait", "wait", "_wait", "poll"})


def _waits_for_children(frame: Frame) -> bool:
    """A launcher's entry module, or subprocess's wait itself (a launcher's frames may be cut from a paste)."""
    return frame.path.replace("\\", "/").endswith((*_LAUNCHER_ENTRY, "/subprocess.py"))


# multiprocessing's Connection (a queue's or a manager's pipe, a Listener/Client socket): its low-level reads
_CONNECTION_MODULE = "multiprocessing/connection.py"
_CONNECTION_IO = frozenset({"_recv", "_recv_bytes", "recv", "recv_bytes", "_send", "send", "_send_bytes"})
PEER_READ = "peer_io"


def phase_of(frames: tuple[Frame, ...], cut: bool = False) -> str | None:
    """Which part of a training step raised: the seed guide asks OOM reports for it, NCCL for init. `cut`: the
    traceback stops before its exception line, so its last frame shown is not where it was raised."""
    funcs = {f.func for f in frames}
    paths = " ".join(f.path for f in frames)
    if any(f.func == "__post_init__" and f.path.endswith(_ELASTIC_ERROR_FILE) for f in frames):
        return LAUNCHER_ERROR_FILE
    if teardown := _launcher_teardown(frames):
        return teardown
    if cut and frames and frames[-1].func in _CHILD_WAITS and any(_waits_for_children(f) for f in frames):
        return LAUNCHER_WAIT  # a stack dumped while the launcher sat waiting for its workers: they never finished
    if cut and frames and frames[-1].func == "set_device" and frames[-1].path.replace("\\", "/").endswith(_CUDA_INIT):
        return CUDA_DEVICE  # the CUDA runtime refused the device (invalid ordinal, busy or unavailable)
    if frames and frames[-1].func == "_main" and frames[-1].path.endswith("multiprocessing/spawn.py"):
        return "child_start"  # a spawned child reading its start-up data from a parent that went away
    if frames and frames[-1].path.replace("\\", "/").endswith(_CONNECTION_MODULE) and frames[-1].func in _CONNECTION_IO:
        return PEER_READ  # reading from a multiprocessing connection whose other end may be gone
    if not cut and frames and frames[-1].func == "<module>" and _INSTALLED.search(frames[-1].path):
        return "import"  # raised by an installed package's module-level code: while it was being imported
    # torch.save / torch.load called straight from a project's data module write or read a dataset cache
    data_cache = bool(frames) and _is_data_module(_innermost_own(frames).path)
    if any(
        _CHECKPOINT_LOAD.search(f.func)
        or "/safetensors/" in f.path
        or (f.func == "load" and f.path.endswith("torch/serialization.py") and not data_cache)
        or f.path.endswith("checkpoint/state_dict_loader.py")  # torch.distributed(._shard).checkpoint
        for f in frames
    ):
        return "checkpoint_load"
    if any(
        _CHECKPOINT_SAVE.search(f.func)
        or (f.func == "save" and f.path.endswith("torch/serialization.py") and not data_cache)
        or (f.func in _MODULE_SAVE and _CHECKPOINT_MODULE.search(f.path.replace("\\", "/")))
        or f.path.endswith("checkpoint/state_dict_saver.py")
        for f in frames
    ):
        return "checkpoint_save"
    if any(f.func == "sharded_state_dict" for f in frames):  # Megatron's dist_checkpointing state of a module
        return "checkpoint_state"
    if any(f.func in _SHARD_CONSOLIDATION for f in frames):  # fairscale FSDP rebuilding full weights from shards
        return "checkpoint_state"
    if any(_SHARD_CONVERSION.search(f.func) for f in frames):
        return "checkpoint_state"
    if any(f.path.endswith(_FSDP_STATE_DICT_MODULES) for f in frames):  # FSDP gathering (optimizer) state dicts
        return "checkpoint_state"
    if frames and frames[-1].func == "_get_env_or_raise":
        return "arguments"  # env:// init reading MASTER_ADDR / RANK that no launcher set: how the job was started
    if any(f.func in _RENDEZVOUS or "torch/distributed/rendezvous.py" in f.path for f in frames):
        return "rendezvous"
    if frames and _checks_arguments(frames[-1]):
        return "arguments"
    if any(f.func == "__init__" and "torch/optim/" in f.path.replace("\\", "/") for f in frames):
        # an optimizer or LR scheduler checking its hyperparameters (`if not 0.0 <= lr`) or calling the schedule
        # with the configured values as it is built
        return "arguments"
    if any(f.func == "get_lr" and f.path.replace("\\", "/").endswith("torch/optim/lr_scheduler.py") for f in frames):
        # the schedule computing a step's rate from its configured lengths (warmup as long as the run divides by zero)
        return "arguments"
    if frames and _CONFIG_MODULE.search(_innermost_own(frames).path.replace("\\", "/")):
        return "arguments"
    if (
        "torch/utils/data/" in paths
        or "torchvision/datasets/" in paths
        or "pyarrow/" in paths
        or _DATA_LIBRARY.search(paths) is not None
        or (frames and (_is_data_module(frames[-1].path) or _TOKENIZER_MODULE.search(frames[-1].path)))
        or _is_data_module(_innermost_own(frames).path if frames else "")
        or any(_DATA_BUILDER.fullmatch(f.func) for f in frames)
    ):
        return "data_loading"
    if funcs & set(_BACKWARD) or "torch/autograd/" in paths:
        return "backward"
    if "torch/optim/" in paths or "/optimizer/" in paths:
        return "optimizer"
    if funcs & set(_INIT):
        return "init"
    if "forward" in funcs or "_call_impl" in funcs:
        return "forward"
    return None


@dataclass(frozen=True)
class ExitRecord:
    """One entry of torchrun's ChildFailedError summary."""

    line: int
    rank: int | None
    local_rank: int | None
    host: str | None
    exitcode: int | None
    signal: str | None
    time: str | None
    torchrun_root: bool
    end_line: int = 0  # last line of this entry (its embedded traceback included)
    pid: int | None = None
    # listed under "Failures:" / "Other Failures:", apart from the root cause: never the first failure
    other_failure: bool = False


def _window(data: bytes, start: int, prefix: Prefix, first_line: int) -> Iterator[tuple[int, Prefix, str]]:
    """Lines after `start` from the same writer as `prefix`, with their line numbers."""
    chunk = data[start : start + WINDOW_BYTES].decode("utf-8", "replace").split("\n")
    key = prefix.stream_key
    adopt = prefix == EMPTY  # a header pasted without its prefix takes the writer of the line after it
    # A logging formatter (`2024-01-01 12:00:00 ERROR | Traceback ...`) prefixes only the first line of a
    # record: the unprefixed lines after it are the same record.
    record = prefix.level is not None or prefix.time is not None
    for offset, raw in enumerate(chunk[:WINDOW_LINES]):
        line_prefix, text = split_prefix(raw.rstrip("\r"))
        if adopt and offset and raw.strip():
            key, adopt = line_prefix.stream_key, False
        if record and offset and line_prefix != EMPTY and line_prefix.stream_key != key:
            record = False  # another writer's line: the record has ended
        if line_prefix.stream_key == key or (offset and not raw.strip()) or (record and line_prefix == EMPTY):
            yield first_line + offset, line_prefix, text


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


def _exception_type(stripped: str) -> str | None:
    found = _EXCEPTION.match(stripped)
    if found is None:
        return None
    kind = found["type"]
    if found["message"] is not None or "." in kind or kind.endswith(("Error", "Exception", "Interrupt", "Exit")):
        return kind
    return None


def parse_traceback(data: bytes, start: int, line_no: int, prefix: Prefix) -> Traceback:
    """Frames and exception line of the traceback whose header is at `start`.

    Tracebacks also appear indented inside torchrun's failure summary (`traceback : Traceback ...`), so
    the exception line is the first line back at the frames' base indentation, not the first unindented.
    """
    lines = _window(data, start, prefix, line_no)
    first = next(lines)[2]
    rich = "╭" in first or "│" in first
    frames: list[Frame] = []
    base: int | None = None
    source: str | None = None
    flat = after_frame = False  # a paste that lost every indent: frames and their code lines at column 0
    for number, line_prefix, text in lines:
        if prefix == EMPTY and line_prefix != EMPTY:
            prefix = line_prefix  # the header lost its prefix in the paste; the body says whose it is
        stripped = text.strip()
        if not stripped:
            continue
        if rich:
            if (m := _RICH_FRAME.search(text)) is not None:
                frames.append(Frame(m["path"], int(m["line"]), m["func"]))
                continue
            if text.lstrip().startswith(("│", "╰", "╭", "|")):
                continue
        elif (m := _FRAME.fullmatch(text)) is not None:
            if base is None:
                base, flat = max(_indent(text) - 2, 0), _indent(text) == 0
            frames.append(_frame(m))
            after_frame = True
            continue
        elif flat and after_frame and _exception_type(stripped) is None and not stripped.startswith("Traceback"):
            source, after_frame = stripped, False  # the code line under its frame, unindented like it
            continue
        elif _indent(text) > (base or 0) or stripped.startswith(("^", "~", "[Previous line repeated")):
            if frames and not stripped.startswith(("^", "~", "[Previous line repeated")):
                source = stripped
            continue
        if stripped.startswith("Traceback (most recent call last)"):
            break  # a new traceback before any exception line: this one was cut off
        if stripped.startswith(_CHAIN):
            continue
        exc_type = _exception_type(stripped)
        if exc_type is None:
            break  # not an exception line: the traceback was cut off or is not one
        # another process's header glued to the end of this line (unbuffered writers sharing a pipe)
        stripped = stripped.split("Traceback (most recent call last)", 1)[0].rstrip() or stripped
        return Traceback(line_no, number, prefix, tuple(frames), stripped, exc_type, source)
    return Traceback(line_no, None, prefix, tuple(frames), None, None, source)


def parse_failures(data: bytes, start: int, line_no: int, prefix: Prefix) -> list[ExitRecord]:
    """The entries of one ChildFailedError / "Root Cause" summary block."""
    records: list[ExitRecord] = []
    current: dict[str, str] = {}
    current_line = last_line = 0
    in_root = in_others = False

    def flush() -> None:
        if current:
            record = _record(current, current_line, in_root)
            records.append(replace(record, end_line=last_line, other_failure=in_others and not in_root))
            current.clear()

    for number, _, text in _window(data, start, prefix, line_no):
        stripped = text.strip()
        if number == line_no and _FAILURE_FIELD.fullmatch(text):
            current_line = number  # a pasted tail of the block: it starts at a field, not at its `[N]:` header
            current.update(_fields_above(data, start, prefix))  # the entry's other fields, above it
        if current_line and stripped and not stripped.startswith(("-----", "=====")):
            last_line = number
        if "Root Cause (first observed failure)" in stripped:
            flush()
            in_root = True
        elif stripped in ("Failures:", "Other Failures:"):
            flush()
            in_others = True
        elif _FAILURE_HEADER.fullmatch(stripped) is not None:
            flush()
            current_line = number
        elif current_line and (m := _FAILURE_FIELD.fullmatch(text)) is not None:
            current.setdefault(m["key"], m["value"].strip())
        elif stripped.startswith(("-----", "=====")):
            flush()
            current_line = 0
            if stripped.startswith("=====") and in_root and records:
                break
        elif current_line or not stripped or stripped.startswith(_BLOCK_TEXT) or stripped.endswith("FAILED"):
            continue  # a multi-line traceback field, or the block's own headings
        elif records:
            break  # left the block
    flush()
    return records


_PROCESS_NAME = regex.compile(
    r"\s*Process name:\s*(?:\[\[\d+,\d+\],(?P<rank>\d+)\]|(?P<host>[\w.-]+)\[(?P<local>\d+)\])\s*"
)
_PROCESS_EXIT = regex.compile(r"\s*Exit code:\s*(?P<code>-?\d+)\s*")
SHELL_SIGNAL_BASE = 128  # a shell or launcher reports a process killed by signal N as exit code 128 + N
_MAX_SIGNAL = 64
# signals whose 256 - N status (a child's -N return code passed to exit()) is no plausible exit code of its own;
# 255 (exit(-1), ssh's and mpirun's failure) is not read as SIGHUP
_WRAPPED_SIGNALS = frozenset({6, 7, 9, 11, 15})


def status_signal(status: int) -> int | None:
    """The signal an 8-bit exit status stands for: 128 + N from a shell, or 256 - N from a program that passed a
    child's negative return code (-9) to exit() (Python's `sys.exit(-9)` exits 247)."""
    if SHELL_SIGNAL_BASE < status <= SHELL_SIGNAL_BASE + _MAX_SIGNAL:
        return status - SHELL_SIGNAL_BASE
    wrapped = 2 * SHELL_SIGNAL_BASE - status
    return wrapped if wrapped in _WRAPPED_SIGNALS else None


def parse_first_process(data: bytes, start: int, line_no: int, prefix: Prefix) -> ExitRecord | None:
    """mpirun's / horovodrun's "The first process to do so was:" with the process name and exit code
    on the lines after it: `Process name: [[50371,1],0]` (job, step, MPI rank) or `worker-1[0]` (host,
    local index)."""
    rank = code = None
    host = None
    for number, _, text in _window(data, start, prefix, line_no):
        if number - line_no > 6:
            break
        if (m := _PROCESS_NAME.fullmatch(text)) is not None:
            # `host[index]` names a slot on a host, not a global rank: only the host is kept
            rank = int(m["rank"]) if m["rank"] else None
            host = m["host"]
        elif (m := _PROCESS_EXIT.fullmatch(text)) is not None:
            code = int(m["code"])
            break
    if code is None or (rank is None and host is None):
        return None
    signal = SIGNAL_NAMES.get(code - SHELL_SIGNAL_BASE) if code > SHELL_SIGNAL_BASE else None
    return ExitRecord(line_no, rank, None, host, code, signal, None, True, end_line=number)


_MPI_ABORT = regex.compile(
    r"\s*MPI_ABORT was invoked on rank (?P<rank>\d+) in communicator .*?(?:with errorcode (?P<code>-?\d+))?\.?\s*"
)
_MPI_ERRORCODE = regex.compile(r"\s*with errorcode (?P<code>-?\d+)\.\s*")


def parse_mpi_abort(data: bytes, start: int, line_no: int, prefix: Prefix) -> ExitRecord | None:
    """Open MPI's `MPI_ABORT was invoked on rank 2 in communicator ...` / `with errorcode 1.`: that MPI rank
    (the job's global rank) asked MPI to end the job with that code."""
    rank = code = None
    for number, _, text in _window(data, start, prefix, line_no):
        if number - line_no > 1:
            break
        if number == line_no and (m := _MPI_ABORT.fullmatch(text)) is not None:
            rank, code = int(m["rank"]), int(m["code"]) if m["code"] else None
        elif code is None and (m := _MPI_ERRORCODE.fullmatch(text)) is not None:
            code = int(m["code"])
    if rank is None or code is None:
        return None
    return ExitRecord(line_no, rank, None, None, code, None, None, False, end_line=line_no + 1)


def _lines_above(data: bytes, start: int, max_lines: int = WINDOW_LINES) -> Iterator[tuple[Prefix, str]]:
    """The lines before the one starting at `start`, nearest first, split into prefix and text."""
    head = data[max(0, start - BACK_BYTES) : start].decode("utf-8", "replace").split("\n")[:-1]
    for raw in reversed(head[-max_lines:]):
        yield split_prefix(raw.rstrip("\r"))


def _fields_above(data: bytes, start: int, prefix: Prefix) -> dict[str, str]:
    """Field lines directly above a summary entry's first field line: the same entry's `time`/`host` when
    the paste cut into it, or its `exitcode` when the block was pasted upside down."""
    fields: dict[str, str] = {}
    for line_prefix, text in _lines_above(data, start, max_lines=6):
        m = _FAILURE_FIELD.fullmatch(text)
        if m is None or line_prefix.stream_key != prefix.stream_key or m["key"] == "rank":
            break
        fields.setdefault(m["key"], m["value"].strip())
    return fields


def _record(fields: dict[str, str], line: int, in_root: bool) -> ExitRecord:
    rank = local = code = pid = None
    if (m := _RANK_FIELD.match(fields.get("rank", ""))) is not None:
        rank, local = int(m["rank"]), int(m["local"])
    if (m := _EXIT_FIELD.match(fields.get("exitcode", ""))) is not None:
        code = int(m["code"])
        pid = int(m["pid"]) if m["pid"] else None
    signal = None
    if (m := _SIGNAL.search(fields.get("traceback", ""))) is not None:
        signal = m["name"]
    elif code is not None and code < 0:
        signal = SIGNAL_NAMES.get(-code, f"signal {-code}")
    return ExitRecord(line, rank, local, fields.get("host"), code, signal, fields.get("time"), in_root, pid=pid)


# Linux numbering, as torchrun prints it (exitcode -N); fixed here so the analysis does not depend on
# the platform it runs on.
SIGNAL_NAMES = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    5: "SIGTRAP",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    10: "SIGUSR1",
    11: "SIGSEGV",
    12: "SIGUSR2",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
    24: "SIGXCPU",
    25: "SIGXFSZ",
    31: "SIGSYS",
}


@dataclass(frozen=True)
class ErrorFile:
    """torchelastic's error.json, written by @record when the entry point raised."""

    exception: str
    traceback: str
    timestamp: float | None


def parse_error_json(data: bytes) -> ErrorFile | None:
    try:
        document = json.loads(data.decode("utf-8", "replace"))
        message = document["message"]
        if isinstance(message, str):
            message = encodable(str(message)).strip()
            return ErrorFile(message.splitlines()[-1] if message else "", "", None)
        text = encodable(str(message.get("message", ""))).strip()
        extra = message.get("extraInfo", {}) or {}
        stamp = extra.get("timestamp")
        return ErrorFile(text, encodable(str(extra.get("py_callstack", ""))), float(stamp) if stamp else None)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _frame(m: regex.Match[str]) -> Frame:
    return Frame(m["path"], int(m["line"]), (m["func"] or "").strip())


def _line_text(data: bytes, start: int) -> str:
    """The line starting at `start`, without its prefixes: the exception line of a headless traceback."""
    return split_prefix(data[start : data.find(b"\n", start)].decode("utf-8", "replace"))[1].strip()


class _LinesAbove:
    """The lines above an exception line, split into prefix and text only as far as a walk reads them (most
    stop after a few lines)."""

    def __init__(self, data: bytes, start: int) -> None:
        self._lines = _lines_above(data, start)
        self._read: list[tuple[Prefix, str]] = []

    def get(self, index: int) -> tuple[Prefix, str] | None:
        while len(self._read) <= index:
            line = next(self._lines, None)
            if line is None:
                return None
            self._read.append(line)
        return self._read[index]


def _next_text(above: _LinesAbove, index: int) -> tuple[int, tuple[Prefix, str]] | None:
    """The first line from `above[index]` up that is not blank, skipping one blank line at most."""
    for i in (index, index + 1):
        line = above.get(i)
        if line is not None and line[1].strip():
            return i, line
    return None


def _under_frame(above: _LinesAbove, index: int, prefix: Prefix) -> bool:
    """The line at `index - 1` (a blank line, or a code line the paste stripped of its indent) sits in a
    traceback's body: the writer's next line up is a frame, or a code line right under one. Only for a writer
    that names itself on every line (`[rank9]: `): without a prefix, a blank line may as well separate two
    processes' output."""
    if prefix == EMPTY:
        return False
    nearest = _next_text(above, index)
    for _ in range(2):
        if nearest is None or nearest[1][0].stream_key != prefix.stream_key:
            return False
        if _FRAME.fullmatch(nearest[1][1]) is not None:
            return True
        nearest = _next_text(above, nearest[0] + 1)
    return False


def frames_above(data: bytes, start: int, line_no: int, prefix: Prefix) -> Traceback | None:
    """The frames printed just above a bare exception line whose Traceback header was cut from a paste.

    Walks back over `  File "...", line N, in f` lines and their code lines from the same writer; returns
    None unless at least one frame is found, so an ordinary log line never becomes a traceback.
    """
    frames: list[Frame] = []
    first = line_no
    above = _LinesAbove(data, start)
    offset = 0
    source: str | None = None  # the innermost frame's code line: the last one above the exception, carets aside
    while (line := above.get(offset)) is not None:
        offset += 1
        line_prefix, text = line
        if not frames and text[:1].isspace() and not text.strip().startswith(("^", "~")):
            source = source or text.strip()
        if not text.strip():
            if _under_frame(above, offset, prefix):
                continue  # a paste that doubled every line break
            break
        if line_prefix.stream_key != prefix.stream_key:
            if line_prefix == EMPTY and prefix != EMPTY:
                continue  # the rest of the writer's line above, wrapped by the terminal it was pasted from
            break
        if text.strip().startswith("Traceback (most recent call last)"):
            return None  # a real header: the forward parser owns this traceback
        if (m := _FRAME.fullmatch(text)) is not None:
            frames.append(_frame(m))
            first = line_no - offset
        elif not text[:1].isspace() and not _under_frame(above, offset, prefix):
            break
    if not frames:
        return None
    exception = _line_text(data, start)
    return Traceback(first, line_no, prefix, tuple(reversed(frames)), exception, _exception_type(exception), source)


_CHAIN_PEEK = 4096  # bytes read under an exception line for the chain marker
_CHAIN_GAP = 3  # the marker follows after at most a blank line or two


def chained_cause(data: bytes, start: int, line_no: int, prefix: Prefix) -> Traceback | None:
    """An exception line followed by "During handling of the above exception" (or "The above exception was the
    direct cause"): the first exception of a chain whose frames the paste left out. It was raised, like the
    exceptions after it, and before them."""
    if data.find(b"above exception", start, start + _CHAIN_PEEK) < 0:
        return None  # the common case, without decoding anything: most signature lines start no chain
    below = data[start : start + _CHAIN_PEEK].decode("utf-8", "replace").split("\n")[1:-1]
    for raw in below[:_CHAIN_GAP]:
        line_prefix, text = split_prefix(raw.rstrip("\r"))
        if not text.strip():
            continue
        if line_prefix.stream_key != prefix.stream_key or not text.strip().startswith(_CHAIN):
            return None
        exception = _line_text(data, start)
        exc_type = _exception_type(exception)
        return Traceback(line_no, line_no, prefix, (), exception, exc_type) if exc_type else None
    return None


def frames_below(data: bytes, start: int, line_no: int, prefix: Prefix, upside_down: bool = True) -> Traceback | None:
    """A traceback pasted upside down: the exception line first, its frames (innermost first) below it.

    Python never prints frames after an exception line without a new `Traceback` header, so two or more
    frames right below it, with no header among them, are this exception's own stack read backwards. With
    `upside_down=False`, a message a program followed with traceback.print_stack() (outermost frame first).
    """
    frames: list[Frame] = []
    last = line_no
    for number, _, text in _window(data, start, prefix, line_no):
        if number == line_no:
            continue
        stripped = text.strip()
        if not stripped or stripped.startswith("Traceback (most recent call last)"):
            break
        if (m := _FRAME.fullmatch(text)) is not None:
            frames.append(_frame(m))
            last = number
        elif not frames and number - line_no > 2:
            return None  # nothing frame-like right under the exception line
        elif frames and number - last > 2:
            break
    if len(frames) < 2:
        return None
    exception = _line_text(data, start)
    stack = tuple(reversed(frames)) if upside_down else tuple(frames)
    return Traceback(line_no, line_no, prefix, stack, exception, _exception_type(exception))
