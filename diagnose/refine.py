"""Correct a candidate by what was printed around it: the frames it was raised in, the backtrace under a
crash, the launcher's or srun's report around it, the file a C++ exception came from.

Each rule reads only candidates (no raw text), runs before incidents are formed, and changes a candidate's
role or category in place (one drops warnings the run survived); decide.build_candidates applies them in order.
"""

from __future__ import annotations

from collections import Counter

import regex

from diagnose.candidates import GENERIC_PRIORITY, Candidate
from diagnose.tracebacks import (
    CUDA_DEVICE,
    LAUNCHER_ERROR_FILE,
    LAUNCHER_SIGNAL,
    LAUNCHER_TEARDOWN,
    LAUNCHER_WAIT,
    PEER_READ,
)

PHASE_CATEGORY = {
    "checkpoint_load": "checkpoint",
    "checkpoint_save": "checkpoint",
    "checkpoint_state": "checkpoint",
    "data_loading": "data",
    "arguments": "config",
    "output_path": "config",
    "rendezvous": "nccl",
    "import": "import",
    LAUNCHER_WAIT: "hang",  # (only a cut traceback has these two phases: a stack dump, not an exception)
    CUDA_DEVICE: "cuda_error",
}
# Programming errors stay code wherever they are raised: a class without the attribute, a name never defined,
# a collective (a DistributedSampler) used before init_process_group is a bug in the caller, not bad data or a
# bad checkpoint. (An attribute of None is different: a value the data or the checkpoint did not provide.)
_PROGRAMMING_ERROR = regex.compile(
    r"\s*(?:[\w.]+\.)?(?:AttributeError: (?!'NoneType')|NameError|UnboundLocalError|SyntaxError|NotImplementedError"
    r"|\w+: Default process group has not been initialized)"
)


def _below(later: Candidate, earlier: Candidate, lines: int) -> bool:
    """`later` was printed in the same file as `earlier`, at most `lines` lines under it: its detail, its backtrace,
    the launcher's next words about it."""
    return later.file == earlier.file and 0 < later.line - earlier.line <= lines


# a spawned child's start-up data ending early: the parent that was sending it went away
_START_DATA_CUT = regex.compile(r"\s*(?:_pickle\.UnpicklingError|EOFError|ConnectionResetError|BrokenPipeError)\b")
_BARE_EOF = regex.compile(r"\s*EOFError\s*$")  # the pipe closed: nothing said but that the other end is gone


def refine_by_phase(candidates: list[Candidate]) -> None:
    """A generic exception raised while a checkpoint was being loaded, or inside torch's data loading
    machinery, is a checkpoint or data failure; a checkpoint signature (torch.save could not open its file)
    raised from a project's data module is about a dataset cache, so data; a spawned child that could not read
    its start-up data is a victim of its parent."""
    refined: dict[tuple[str, str], str] = {}
    for c in candidates:
        if (
            c.from_traceback
            and c.priority < GENERIC_PRIORITY
            and c.role == "root"
            and c.phase in PHASE_CATEGORY
            # a library's module-level code failing on import (`module 'x' has no attribute 'y'`) is a version
            # mismatch, whatever the exception type
            and (c.phase == "import" or not _PROGRAMMING_ERROR.match(c.text))
        ):
            c.category = refined[c.signature] = PHASE_CATEGORY[c.phase]
    killed = any(c.category == "killed" for c in candidates if c.pattern is not None)
    peers_gone = [
        c
        for c in candidates
        if c.from_traceback and c.phase == PEER_READ and c.role == "root" and _START_DATA_CUT.match(c.text)
    ]
    if killed and peers_gone:
        # a read from a multiprocessing connection ending because the other process is gone, when the logs show a
        # process killed: a victim of that kill (a data server's step killed, its clients' EOFError)
        for c in peers_gone:
            c.role, c.category = "symptom", "killed"
        _promote_first_srun_kill(candidates)
    for c in peers_gone:
        if _BARE_EOF.match(c.text):
            # with no kill in the logs either, a parent's bare EOFError on a worker's pipe (stable-baselines3's
            # SubprocVecEnv, a Pool) says only that the worker died; its own error is not here
            c.role, c.category = "symptom", "unknown"
    for c in candidates:
        if c.from_traceback and c.phase == "child_start" and c.role == "root" and _START_DATA_CUT.match(c.text):
            # the child could not even read what its parent sent it: the parent died first (a MemoryError there
            # is the child's own: the data it was sent did not fit)
            c.role, c.category = "symptom", "killed"
    for c in candidates:
        # torch.save / torch.load failing under a project's data module: the file is a dataset cache
        if c.from_traceback and c.category == "checkpoint" and c.phase == "data_loading":
            c.category = refined[c.signature] = "data"
    for c in candidates:  # the same line printed again without its traceback (a paste cut above it)
        if c.signature in refined and (c.priority < GENERIC_PRIORITY or c.category == "checkpoint"):
            c.category = refined[c.signature]


_SRUN_KILLED, _SRUN_EXITED = "srun-task-killed", "srun-task-exit-code"


def _promote_first_srun_kill(candidates: list[Candidate]) -> None:
    """With the peers' errors read as victims and no other root left, srun's report of a task killed before any
    task exited (`srun: error: vm: task 0: Killed`, then the others' exit codes) is the first failure."""
    if any(c.role == "root" for c in candidates):
        return
    for kill in (c for c in candidates if c.pattern is not None and c.pattern.id == _SRUN_KILLED):
        exits = [
            c for c in candidates if c.pattern is not None and c.pattern.id == _SRUN_EXITED and c.file == kill.file
        ]
        if all(e.line > kill.line for e in exits):
            kill.role = "root"
            return


# phases of a launcher's own code that only runs once workers are dying (tracebacks.phase_of)
_LAUNCHER_AFTERMATH = frozenset({LAUNCHER_ERROR_FILE, LAUNCHER_SIGNAL, LAUNCHER_TEARDOWN})


def refine_launcher_error_file(candidates: list[Candidate]) -> None:
    """torchrun reads the error file each worker writes as it dies. A worker killed in the middle of writing it
    (the watchdog aborting the process) leaves it empty, and the agent's own traceback then ends in a JSON
    error: the launcher tripping over the aftermath, not a cause. So is DeepSpeed's launcher failing in the
    handler that stops its workers."""
    aftermath = {c.signature for c in candidates if c.from_traceback and c.phase in _LAUNCHER_AFTERMATH}
    for c in candidates:
        if c.signature in aftermath:
            c.role, c.category, c.subcategory = "symptom", "killed", "teardown"


_DETAIL_BELOW = 4  # a runtime's own account of an error, printed right under the exception line
# a rendezvous store's own waits (c10d's `waitForInput ... timed out`): another process waiting, not a detail
_STORE_WAITS = frozenset({"store-key-wait-timeout", "store-socket-wait-timeout", "store-based-barrier-timeout"})


def refine_by_timeout_detail(candidates: list[Candidate]) -> None:
    """A generic device error raised while waiting on a collective, with the runtime's detail just under it saying
    the collective timed out (Ascend's `NPU error, error code is 107020` above CANN's "hccl ... task timeout"), is
    that timeout: a hang symptom, not a bug of its own."""
    timeouts = [
        c
        for c in candidates
        if c.role == "symptom" and c.category == "hang" and not (c.pattern and c.pattern.id in _STORE_WAITS)
    ]
    for c in candidates:
        if c.role != "root" or not c.from_traceback or c.priority >= GENERIC_PRIORITY:
            continue
        if any(_below(t, c, _DETAIL_BELOW) for t in timeouts):
            c.role, c.category, c.subcategory = "symptom", "hang", None


_COMPILE_WRAPPER = "torch-compile-error"


_TRACED_OP = regex.compile(r"Failed running|when making fake tensor call")


def refine_compile_wrappers(candidates: list[Candidate]) -> None:
    """torch.compile tracing an operation that fails re-raises the eager error inside its own TorchRuntimeError
    (`Failed running call_function ...`), with the eager message on the next line: that message's signature says
    what failed (a shape that does not broadcast), not the compiler. Later versions word it `RuntimeError when
    making fake tensor call` and put the eager error in the `Explanation:` line under it."""
    for c in candidates:
        if c.role != "root" or c.pattern is None or c.pattern.id != _COMPILE_WRAPPER or not _TRACED_OP.search(c.text):
            continue
        detail = next(
            (
                d
                for d in candidates
                if d.role == "root" and d.pattern is not None and d.category != "code" and _below(d, c, _DETAIL_BELOW)
            ),
            None,
        )
        if detail is not None:  # one failure: the raised wrapper is quoted, its eager message says what it is
            c.category, c.subcategory = detail.category, detail.subcategory
            detail.role = "context"


# an exception whose message is another exception printed on the next line: torch.compile's
# `BackendCompilerFailed: backend='compile_fn' raised:` over `NotImplementedError: ...`
_WRAPPER_END = " raised:"


def refine_wrapped_exceptions(candidates: list[Candidate]) -> None:
    """The wrapper says only that the compiler's backend failed; the exception on the next line says how, and
    is what the user searches for."""
    for c in candidates:
        if c.role != "root" or not c.text.rstrip().endswith(_WRAPPER_END):
            continue
        inner = next((d for d in candidates if d.role == "root" and _below(d, c, 1)), None)
        if inner is not None:
            c.role = "context"
            inner.from_traceback = inner.from_traceback or c.from_traceback
            inner.phase = inner.phase or c.phase


_NEXT_TRACEBACK_LINES = 4  # a blank line, "During handling of the above exception ...", a blank line


# an exception line: a type named like one, or any class given with its module path (`triton.runtime.errors.OutOfResources:`)
_EXCEPTION_LINE = regex.compile(
    r"\s*(?:(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt)\b|(?:[a-z_]\w*\.)+[A-Z]\w*: )"
)


_CHAINED_TRACEBACK = 80  # the chained exception's traceback printed under the first exception's line


def refine_chained_causes(candidates: list[Candidate]) -> None:
    """The first exception of a chain printed without its frames (`ValueError: could not convert ...` over "The
    above exception was the direct cause of the following exception:") was raised where the chained exception's
    traceback below it shows: reading data, loading a checkpoint. That phase gives a generic first exception its
    category, as a traceback of its own would have."""
    for c in candidates:
        if c.role != "root" or not c.from_traceback or c.code_file or c.phase:
            continue
        if c.priority >= GENERIC_PRIORITY or _PROGRAMMING_ERROR.match(c.text):
            continue
        chained = next(
            (
                d
                for d in candidates
                if d is not c and d.from_traceback and d.code_file and _below(d, c, _CHAINED_TRACEBACK)
            ),
            None,
        )
        if chained is not None and chained.phase in PHASE_CATEGORY:
            c.phase, c.category = chained.phase, PHASE_CATEGORY[chained.phase]


def refine_by_cut_traceback(candidates: list[Candidate], cut: list[tuple[str, int, str | None, int | None]]) -> None:
    """A paste often starts with one rank's exception line, its frames cut off above, followed by another rank's
    traceback of the same failure cut off before its exception line. That traceback's frames say where both
    were (loading a checkpoint, reading data); so do the frames of the traceback a chained exception was raised
    under ("During handling of the above exception"), cut off the same way. A log line with no rank of its own
    right above a rank's cut traceback is that process's: a library logs the error (`Failed to load JSON from
    file ...`) and then raises it. `cut`: (file, first line, phase, rank) of tracebacks with no exception."""
    for c in candidates:
        if c.role != "root":
            continue
        below = next((t for t in cut if t[0] == c.file and 0 < t[1] - c.line <= _NEXT_TRACEBACK_LINES), None)
        if below is None:
            continue
        _, _, phase, rank = below
        if c.rank is None and rank is not None and not c.from_traceback and not _EXCEPTION_LINE.match(c.text):
            c.rank, c.rank_inferred = rank, True  # (an exception line there may be another process's, unprefixed)
        if not c.phase and c.category == "checkpoint" and phase == "data_loading":
            c.category = "data"  # a file write failing while a dataset was built: its cache, as refine_by_phase says
        if c.phase or c.priority >= GENERIC_PRIORITY or _PROGRAMMING_ERROR.match(c.text):
            continue
        if phase in PHASE_CATEGORY:
            c.category = PHASE_CATEGORY[phase]


_GDB_ABORT, _GDB_FRAME = "gdb-abort-backtrace", "gdb-frame"
# the C++ runtime's own frames between abort() and the code that threw: raise, abort, std::terminate, __cxa_throw,
# throw helpers
_THROW_MACHINERY = regex.compile(r"__|std::|raise$|abort$|.*(?:Thrower|terminate|throw)", regex.IGNORECASE)
_GDB_BACKTRACE_LINES = 40


def refine_gdb_backtraces(candidates: list[Candidate]) -> None:
    """An abort seen in a gdb backtrace is quoted by the first frame under it that is not the C++ runtime's
    machinery: the function that threw what nobody caught."""
    frames = sorted(
        (c for c in candidates if c.pattern is not None and c.pattern.id == _GDB_FRAME), key=lambda c: c.line
    )
    for c in candidates:
        if c.pattern is None or c.pattern.id != _GDB_ABORT:
            continue
        thrower = next(
            (
                f
                for f in frames
                if _below(f, c, _GDB_BACKTRACE_LINES) and not _THROW_MACHINERY.match(f.fields.get("function") or "")
            ),
            None,
        )
        if thrower is not None:
            c.text = thrower.text


_CRASH_PATTERNS = ("segfault", "sigfpe-crash")
_LIBRARY_FRAMES = frozenset({"cuda-library-frame", "openmpi-backtrace-cuda-frame"})
_SERIALIZATION_FRAME = "serialization-native-frame"  # torch.save / torch.load's zip archive in C++
_BACKTRACE_LINES = 20


def refine_native_crashes(candidates: list[Candidate]) -> None:
    """A signal crash whose native backtrace (printed right after it, or just before) runs through the CUDA
    driver, cuBLAS or cuDNN is a failure of that CUDA library, not an anonymous kill; one whose backtrace runs
    through torch's checkpoint serialization happened while a checkpoint was written or read."""
    frames = [c for c in candidates if c.pattern is not None and c.pattern.id in _LIBRARY_FRAMES]
    saving = [c for c in candidates if c.pattern is not None and c.pattern.id == _SERIALIZATION_FRAME]
    for c in candidates:
        if c.pattern is None or c.pattern.id not in _CRASH_PATTERNS:
            continue
        # (Open MPI prints the backtrace first and then the process's own "Caught signal" line)
        if any(_below(f, c, _BACKTRACE_LINES) or _below(c, f, _BACKTRACE_LINES) for f in frames):
            c.category, c.subcategory = "cuda_error", "library_crash"
        elif any(_below(f, c, _BACKTRACE_LINES) for f in saving):
            c.category, c.subcategory = "checkpoint", "crash_in_serialization"


_CRASH_AFTER_LINES = 3  # the crash line follows the failure's own WARN lines
CRASH_AFTERMATH = "crash_aftermath"


def refine_crash_after_nccl_failure(candidates: list[Candidate]) -> None:
    """A native crash printed right after an NCCL failure logged in the same file is that process going down
    from it (NCCL's proxy failing a connection, then the segfault of the teardown): the failure is the cause."""
    failures = [c for c in candidates if c.role == "root" and c.category == "nccl" and not c.from_traceback]
    for c in candidates:
        crash = c.pattern is not None and c.pattern.id in _CRASH_PATTERNS
        if crash and any(_below(c, f, _CRASH_AFTER_LINES) for f in failures):
            c.role, c.subcategory = "symptom", CRASH_AFTERMATH


# Exceptions whose message says little next to the source line that raised them: a bare assert, a missing key or
# index (`parallel_devices[local_rank]`), a division by zero (`rank % num_gpus` with no GPU visible), a syntax error
# (in a file that is a shell script).
_SOURCE_TELLS = regex.compile(r"\s*(?:AssertionError\s*$|KeyError:|IndexError:|ZeroDivisionError:|SyntaxError:)")


_LAUNCHER_REPORT = "launcher_report"


def refine_bare_asserts(candidates: list[Candidate]) -> None:
    """A bare `AssertionError` says nothing; the asserted source line just above it in the traceback
    does (`assert steps % world_size == 0`). A context signature on that line lends its category. So does the
    line a generic KeyError or ZeroDivisionError was raised on (`example["images"]`, `rank % num_gpus`), and the
    file a SyntaxError names (`dist_train.sh`: a shell script run with Python). A parent asserting a worker's exit
    code only reports that worker's failure."""
    sources = {(c.file, c.line): c for c in candidates if c.role == "context" and c.pattern is not None}
    for c in candidates:
        # not only rebuilt tracebacks: a paste that starts mid-traceback still quotes the source line above
        if c.role != "root" or c.priority >= GENERIC_PRIORITY or not _SOURCE_TELLS.match(c.text):
            continue
        source = next((sources[(c.file, c.line - k)] for k in (1, 2, 3) if (c.file, c.line - k) in sources), None)
        # (a wrapper line such as Ray's `RayTaskError(AssertionError)` is context too, but names no category)
        if source is not None and source.pattern is not None and source.category not in (c.category, "unknown"):
            c.pattern, c.category, c.subcategory = source.pattern, source.category, source.subcategory
            c.priority, c.fields = source.pattern.priority, source.fields
            if source.subcategory == _LAUNCHER_REPORT:  # `assert 0 == p.exitcode`: a parent reporting a worker
                c.role = "symptom"


_IB_DEVICE_SKIPPED = regex.compile(r"Call to ibv_open_device failed|NET/IB : Unable to open device")
_IB_DEVICES_IN_USE = "nccl-ib-devices-in-use"


def refine_skipped_ib_devices(candidates: list[Candidate]) -> None:
    """NCCL probes every RDMA device on the host and warns about one it cannot open (a virtual function, a port
    without a link); when the same host then lists the devices it will use, the job went on with those, and the
    warnings are not why it failed."""
    in_use: dict[tuple[str, str | None], int] = {}
    for c in candidates:
        if c.pattern is not None and c.pattern.id == _IB_DEVICES_IN_USE:
            key = (c.file, c.host)
            in_use[key] = max(in_use.get(key, 0), c.line)
    # dropped rather than demoted: as a symptom or a warning they would still make the pure-NCCL verdict
    candidates[:] = [
        c for c in candidates if not (_IB_DEVICE_SKIPPED.search(c.text) and in_use.get((c.file, c.host), 0) > c.line)
    ]


_RETRIED_LOOKUP = "rendezvous-address-unresolved"
_RETRIES = 3  # a lookup failing this often for one address is a retry loop, not a one-off IPv6 miss


def refine_retried_lookups(candidates: list[Candidate]) -> None:
    """c10d warns on every failed lookup of the rendezvous address while it retries. One warning is often
    harmless (no IPv6 record for a host IPv4 reaches); the same address failing again and again is a job that
    never reached its master, and that is why it died (the time limit or rendezvous timeout comes after)."""
    lookups = [c for c in candidates if c.pattern is not None and c.pattern.id == _RETRIED_LOOKUP]
    counts = Counter((c.fields.get("host"), c.fields.get("port")) for c in lookups)
    for c in lookups:
        if counts[(c.fields.get("host"), c.fields.get("port"))] >= _RETRIES:
            c.role = "root"


def refine_launcher_reports(candidates: list[Candidate]) -> None:
    """Launchers' and srun's reports of a worker's failure, and uncaught C++ exceptions, read in context."""
    _refine_srun_teardown(candidates)
    _refine_step_time_limits(candidates)
    _refine_forced_group_kill(candidates)
    _refine_spawn_wrappers(candidates)
    _refine_cpp_exceptions(candidates)
    _refine_ray_task_wrappers(candidates)
    _refine_ray_actor_deaths(candidates)
    _refine_dataloader_worker_relays(candidates)
    _refine_checkpoint_exception_relays(candidates)
    _refine_store_error_tails(candidates)
    _refine_aborts_after_comm_failures(candidates)


# a launcher that kills its whole process group, itself included, once a child failed (Lightning's observer)
_GROUP_KILLERS = frozenset({"lightning-child-terminated"})
_GROUP_KILL_LINES = 3  # the launcher's notice, then the shell's "Killed" for the launcher itself


def _refine_forced_group_kill(candidates: list[Candidate]) -> None:
    """The shell's "Killed" right after a launcher announced it is killing every process because a child failed is
    that clean-up, not an outside kill: the child's own error is the cause."""
    notices = [c for c in candidates if c.pattern is not None and c.pattern.id in _GROUP_KILLERS]
    for c in candidates:
        if (
            c.pattern is not None
            and c.pattern.id == "shell-killed"
            and any(_below(c, n, _GROUP_KILL_LINES) for n in notices)
        ):
            c.role = "symptom"


_RAY_TASK_WRAPPER = regex.compile(r"\s*(?:[\w.]+\.)?RayTaskError\((?P<inner>[\w.]+)\): ray::")
_RAY_REMOTE_FRAMES = 80  # the remote task's traceback printed under Ray's wrapper line


def _refine_ray_task_wrappers(candidates: list[Candidate]) -> None:
    """`ray.get` re-raises a task's exception as `RayTaskError(X): ray::task() (pid=..)` with the task's own
    traceback under it, ending in the original `X: message`. That line is the cause; the wrapper only relays it.
    A driver's `ray.get` on a task that itself called `ray.get` nests the wrappers: the innermost names the task
    that raised."""
    for wrapper in candidates:
        m = _RAY_TASK_WRAPPER.match(wrapper.text)
        if m is None or wrapper.role != "root":
            continue
        inner = m["inner"].rsplit(".", 1)[-1]
        if any(
            _below(c, wrapper, _RAY_REMOTE_FRAMES)
            and (c.role == "root" and c.text.lstrip().split(":", 1)[0].rsplit(".", 1)[-1] == inner or _nests(c, inner))
            for c in candidates
        ):
            wrapper.role = "symptom"


_RAY_ACTOR_DEATHS = frozenset({"ray-worker-died", "ray-actor-died"})
_RAY_WORKER_FATAL = "ray-worker-unhandled-exception"


def _refine_ray_actor_deaths(candidates: list[Candidate]) -> None:
    """The driver's "The actor is dead because its worker process has died" is Ray relaying a death; the worker's
    own fatal line (Ray's C++ log of an unhandled exception, forwarded with the worker's prefix) says why, wherever
    Ray's log forwarding put it in the file."""
    if any(c.pattern is not None and c.pattern.id == _RAY_WORKER_FATAL and c.role == "root" for c in candidates):
        for c in candidates:
            if c.pattern is not None and c.pattern.id in _RAY_ACTOR_DEATHS and c.role == "root":
                c.role = "symptom"


def _nests(candidate: Candidate, inner: str) -> bool:
    m = _RAY_TASK_WRAPPER.match(candidate.text)
    return m is not None and m["inner"].rsplit(".", 1)[-1] == inner


_WORKER_RELAY = "dataloader-worker-exception"
_WORKER_TRACEBACK = 80  # the worker's "Original Traceback" printed under the relayed exception's line


def _refine_dataloader_worker_relays(candidates: list[Candidate]) -> None:
    """The DataLoader re-raises a worker's exception as `X: Caught X in DataLoader worker process N.` with the
    worker's original traceback under it. That line says where it happened (loading data); the original message
    under it, however specific (a tensor size in a collate function), is its detail, not a second failure, unless
    the worker could not import a module (the environment lacks a package: `import`) or initialise CUDA."""
    relays = [c for c in candidates if c.pattern is not None and c.pattern.id == _WORKER_RELAY and c.role == "root"]
    for relay in relays:
        # another rank's relay printed right below (two ranks' loaders failing alike) is a failure of its own
        details = [
            c
            for c in _raised_under(relay, candidates, _WORKER_TRACEBACK)
            if c.pattern is not relay.pattern and (c.rank is None or relay.rank is None or c.rank == relay.rank)
        ]
        for c in details:
            if c.category in ("import", "cuda_error"):
                # a module the worker could not import, CUDA it could not initialise (a forked worker touching the
                # GPU): the environment, not the data
                relay.role = "symptom"
            else:
                c.role = "symptom"


def _raised_under(wrapper: Candidate, candidates: list[Candidate], lines: int) -> list[Candidate]:
    """The root exceptions of the tracebacks a wrapper line relays, printed within `lines` under it."""
    return [c for c in candidates if c.role == "root" and c.from_traceback and _below(c, wrapper, lines)]


_DCP_RELAY = regex.compile(r"(?:[\w.]+\.)?CheckpointException: CheckpointException ranks:")
_DCP_TRACEBACKS = 80  # the failed ranks' own tracebacks, each headed `Traceback (most recent call last): (RANK N)`


def _refine_checkpoint_exception_relays(candidates: list[Candidate]) -> None:
    """torch.distributed.checkpoint gathers every rank's failure into one `CheckpointException ranks:dict_keys([..])`
    that all ranks raise, followed by each failed rank's own traceback: that error, however plain (an
    AssertionError), is the cause and names its rank; the collective exception only relays it."""
    relays = [c for c in candidates if c.role == "root" and _DCP_RELAY.match(c.text.lstrip())]
    for relay in relays:
        if _raised_under(relay, candidates, _DCP_TRACEBACKS):
            relay.role = "symptom"


_STORE_ERROR_HEAD = "nccl-unique-id-wait"
_STORE_ERROR_TAIL = "store-get-failed-tail"
_STORE_ERROR_FRAMES = 200  # the C++ frames of the store's error printed between the message's head and its tail


def _refine_store_error_tails(candidates: list[Candidate]) -> None:
    """The tail of ProcessGroupNCCL's ncclUniqueId message stands for the failure only where its head is not in the
    logs (a paste that starts below it); under its head it is that message's last line."""
    heads = [c for c in candidates if c.pattern is not None and c.pattern.id == _STORE_ERROR_HEAD]
    tails = [c for c in candidates if c.pattern is not None and c.pattern.id == _STORE_ERROR_TAIL]
    for c in tails:
        if any(_below(c, h, _STORE_ERROR_FRAMES) or (h.file == c.file and h.line == c.line) for h in heads):
            c.role = "symptom"


_ABORT_NOTICES = frozenset({"process-aborted"})
_TAKES_PROCESS_DOWN = frozenset({"hang", "nccl"})


def _refine_aborts_after_comm_failures(candidates: list[Candidate]) -> None:
    """ProcessGroupNCCL's watchdog aborts its process after a collective timeout or a communicator error, and
    faulthandler then prints `Fatal Python error: Aborted`: with such a failure above it in the same file, the
    abort is that teardown, not a failure of its own."""
    first_failure: dict[str, int] = {}  # file -> the line of its first communication failure
    for c in candidates:
        if c.category in _TAKES_PROCESS_DOWN and c.pattern is not None:
            first_failure[c.file] = min(first_failure.get(c.file, c.line), c.line)
    aborts = [c for c in candidates if c.pattern is not None and c.pattern.id in _ABORT_NOTICES and c.role == "root"]
    for c in aborts:
        if first_failure.get(c.file, c.line) < c.line:
            c.role = "symptom"


_TIME_LIMIT = "slurm-time-limit"


def _refine_step_time_limits(candidates: list[Candidate]) -> None:
    """slurmstepd reports a time limit twice: `*** JOB 35 ON vm CANCELLED ... DUE TO TIME LIMIT ***` in the batch
    output and `*** STEP 35.0 ...` in each step's, at the same second. The job's limit is the cause; the step's
    cancellation is what it did to the step."""
    limits = [c for c in candidates if c.pattern is not None and c.pattern.id == _TIME_LIMIT]
    jobs = {c.fields.get("job") for c in limits if c.fields.get("what") == "JOB"}
    for c in limits:
        if c.fields.get("what") == "STEP" and (c.fields.get("job") or "").split(".")[0] in jobs:
            c.role, c.subcategory = "symptom", "teardown"


# how srun names a task killed by a signal it did not catch: SIGKILL, or a signal SLURM sent it (`--signal=USR1@60`
# reaching a process with no handler, a hang-up, an interrupt)
_SIGNALLED = {
    "Killed": "sigkill",
    "User defined signal 1": "sigusr1",
    "User defined signal 2": "sigusr2",
    "Hangup": "sighup",
    "Interrupt": "sigint",
    "Quit": "sigquit",
}


def _refine_srun_teardown(candidates: list[Candidate]) -> None:
    """When srun itself ends a step (`_step_signal: Terminating StepId=26.0`, after a task died and
    --kill-on-bad-exit), slurmstepd's `*** STEP 26.0 ... CANCELLED ***` is that teardown, not a cancel from
    outside; a task srun reported killed just before it is the one whose death started it."""
    ended = [c for c in candidates if c.pattern is not None and c.pattern.id == "srun-step-terminated"]
    steps = {c.fields.get("step") for c in ended}
    for c in candidates:
        if c.pattern is None:
            continue
        if c.pattern.id == "slurm-cancelled" and c.fields.get("job") in steps and not c.fields.get("reason"):
            c.role, c.subcategory = "symptom", "teardown"
        elif (
            c.pattern.id == "srun-task-killed"
            and c.fields.get("how") in _SIGNALLED
            and any(_below(e, c, _SRUN_BEFORE_END) for e in ended)
        ):
            c.role, c.priority = "root", SIGNAL_DEATH_PRIORITY
            c.subcategory = _SIGNALLED[c.fields["how"]]


_SPAWN_WRAPPER = regex.compile(r"\s*(?:[\w.]*ProcessRaisedException|Exception):\s*$")
_SPAWN_HEADER_AFTER = 3  # the wrapper's message starts with a blank line, then the header


def _refine_spawn_wrappers(candidates: list[Candidate]) -> None:
    """torch.multiprocessing.spawn re-raises a worker's failure in the parent as `Exception:` (later
    `ProcessRaisedException:`) whose message is `-- Process 3 terminated with the following error:` and the
    worker's own traceback: the parent's exception is the launcher reporting, like torchrun's ChildFailedError."""
    headers = [c for c in candidates if c.pattern is not None and c.pattern.id == "mp-spawn-process-failed"]
    for c in candidates:
        if (
            c.from_traceback
            and _SPAWN_WRAPPER.match(c.text)
            and any(_below(h, c, _SPAWN_HEADER_AFTER) for h in headers)
        ):
            c.role, c.category = "context", "killed"  # as torchrun-child-failed


_THROWN_IN = (
    (regex.compile(r"ProcessGroup\w*\.cpp|NCCLUtils|/gloo/|hccl", regex.I), "nccl"),
    (regex.compile(r"/cuda/|CUDA\w*\.(?:cpp|cu|h)", regex.I), "cuda_error"),
)
_ORIGIN_AFTER = 2  # `what():` then `Exception raised from F at FILE:N` on the next line


def _refine_cpp_exceptions(candidates: list[Candidate]) -> None:
    """An uncaught C++ exception's what() line takes its category from the file that threw it, named just
    under it (`Exception raised from getHCCLDataSize at .../ProcessGroupHCCL.cpp`): a process group's
    failure is a communication failure, a CUDA source's a CUDA error."""
    origins = [c for c in candidates if c.pattern is not None and c.pattern.id == "cpp-exception-origin"]
    for c in candidates:
        if c.pattern is None or c.pattern.id != "cpp-uncaught-exception":
            continue
        below = [o for o in origins if _below(o, c, _ORIGIN_AFTER)]
        thrown_in = below[0].fields.get("file", "") if below else ""
        category = next((cat for pattern, cat in _THROWN_IN if pattern.search(thrown_in)), None)
        if category is not None:
            c.category, c.subcategory = category, None


_SRUN_BEFORE_END = 3  # srun reports the dead task, then at once terminates the step
SIGNAL_DEATH_PRIORITY = 45  # as a signal death from torchrun's summary
