"""Reconcile the identities each line carries into one GLOBAL rank, or say it is unknown.

Sources, most trusted first: the line's own `[rankN]` prefix or "Rank N" in the message; the launcher
manifest; torchrun's failure summary (`rank : 6 (local_rank: 2)`); what other lines of the same file
or the same (srun task, local rank) stream revealed; and only then arithmetic (node index x ranks per
node + local rank), which is marked as inferred. A single-node job is the one case where a local rank
is the global rank.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import polars as pl
import regex

from diagnose.rankset import parse_ranks

Census = set[tuple[int | None, int | None, int | None]]
_TYPICAL_NODE = 8


@dataclass(frozen=True)
class RankMap:
    """How (srun task or torchrun run dir, local rank) pairs map to global ranks in this job."""

    stream: dict[tuple[object, int], int]
    nodes: tuple[object, ...]
    per_node: int | None
    single_node: bool
    task_is_rank: bool = False


def _node_key(task: int | None, run_dir: str | None) -> object:
    return ("task", task) if task is not None else ("dir", run_dir) if run_dir is not None else None


def build_rank_map(events: pl.DataFrame, census: Census, run_dirs: frozenset[str] = frozenset()) -> RankMap:
    votes: dict[tuple[object, int], Counter[int]] = {}

    def vote(node: object, local: int | None, rank: int | None) -> None:
        if node is not None and local is not None and rank is not None:
            votes.setdefault((node, local), Counter())[rank] += 1

    for task, local, rank in census:
        vote(_node_key(task, None), local, rank)
    for row in events.select("task", "run_dir", "local_rank", "rank", "file_rank").iter_rows(named=True):
        vote(
            _node_key(row["task"], row["run_dir"]),
            row["local_rank"],
            row["rank"] if row["rank"] is not None else row["file_rank"],
        )
    stream = {key: counter.most_common(1)[0][0] for key, counter in votes.items()}
    nodes = {_node_key(r["task"], r["run_dir"]) for r in events.select("task", "run_dir").iter_rows(named=True)}
    # (a bare task label says nothing of nodes: with one task per rank it is a rank, see census_ranks)
    nodes |= {
        _node_key(task, None) for task, local, rank in census if task is not None and (local, rank) != (None, None)
    }
    # every torchrun run directory among the inputs is a node, lines or not (a node whose ranks printed nothing
    # the signatures know is still a node: its local ranks are not the global ones)
    nodes |= {_node_key(None, run_dir) for run_dir in run_dirs}
    nodes.discard(None)
    locals_seen = [v for v in events.get_column("local_rank").drop_nulls().to_list()]
    locals_seen += [local for _, local, _ in census if local is not None]
    per_node = max(locals_seen) + 1 if locals_seen else None
    ranks_seen = events.get_column("rank").drop_nulls().to_list() + [r for _, _, r in census if r is not None]
    # A local rank labelled with its host (`[gpu187:2]:`) comes from a launcher that tells hosts apart:
    # that is no evidence of a single node, so such ranks stay local instead of being guessed global.
    # (NCCL's `host:pid:tid` header names the host of a line whose local rank came from its file: not that.)
    host_scoped = (
        events.filter(pl.col("host").is_not_null() & pl.col("local_rank").is_not_null() & pl.col("rank").is_null())
        .filter((pl.col("kind") != "exit") & pl.col("pid").is_null())
        .height
        > 0
    )
    # Local ranks seen bound the node size from below; seeing only local rank 0 says nothing, so a global rank
    # up to a typical 8-GPU node does not by itself mean a second node.
    node_size = per_node if per_node is not None and per_node > 1 else _TYPICAL_NODE
    single = not host_scoped and len(nodes) <= 1 and (per_node is None or not ranks_seen or max(ranks_seen) < node_size)
    return RankMap(stream, tuple(sorted(nodes, key=str)), per_node, single, _task_is_rank(events, census, per_node))


_LAUNCHER_BANNER = "torchrun-start-banner"  # torchrun's start-up banner: a launcher below srun
_LAUNCHER_ENTRY_FILE = r"(?:^|/)torchrun$|torch/distributed/(?:run|launch)\.py$"


def _task_is_rank(events: pl.DataFrame, census: Census, per_node: int | None) -> bool:
    """`srun --label` with no launcher below it (one srun task per GPU, Megatron's classic SLURM recipe)
    makes the task id the global rank. A torchrun per node would show itself through local ranks or its
    failure summary, and a line whose own rank differs from its task rules the reading out."""
    below = any(
        task is not None and (local is not None or (rank is not None and rank != task)) for task, local, rank in census
    )
    below = below or events.filter((pl.col("pattern") == _LAUNCHER_BANNER) & pl.col("task").is_not_null()).height > 0
    # ...or the agent's own traceback (a rendezvous that failed before any worker started): its innermost project
    # frame is torchrun's entry script
    below = below or (
        events.filter(
            pl.col("task").is_not_null()
            & (pl.col("kind") == "traceback")
            & pl.col("code_file").str.contains(_LAUNCHER_ENTRY_FILE)
        ).height
        > 0
    )
    if per_node is not None or below:
        return False
    tasks = events.filter(pl.col("task").is_not_null())
    if tasks.is_empty() or events.filter(pl.col("kind") == "exit").height:
        return False
    named = tasks.select("task", pl.coalesce("rank", "file_rank").alias("own")).drop_nulls()
    return bool((named.get_column("task") == named.get_column("own")).all())


# a process manager below srun: torchrun / torch.distributed.launch, mp.spawn, DeepSpeed's or accelerate's launcher
# (a trainer's own `local_rank=0` is no sign: srun sets SLURM_LOCALID for it too)
_LAUNCHER_BELOW = (
    r"torch\.distributed\.(?:elastic|run|launch)\b|torchrun|torch\.multiprocessing|\bmp\.spawn\b"
    r"|deepspeed\.launcher|\bdeepspeed\b.*\blaunch|accelerate(?:\.commands)?[ .]launch"
)
# the patterns of launchers that run below srun and print their own lines (their ids' common beginnings)
_LAUNCHER_PATTERNS = r"^(?:torchrun-|elastic-|mp-spawn|deepspeed-launcher|deepspeed-killing|dist-launch)"
_SRUN_END_GAP = 10  # an exception line, a few lines other tasks went on printing, then srun's end line


def _srun_alone_unlabelled(events: pl.DataFrame, census: Census) -> bool:
    """Plain srun (no `--label`) starting the trainer itself: no line carries a task id, but srun's own end
    lines (`srun: error: vm: task 1: Exited with exit code 1`) do, and SLURM_PROCID, the task id, is the rank
    such a trainer takes. Any sign of a process manager below srun (a parsed local rank, a launcher's name)
    makes the task a node instead, so the reading is only made when nothing of the kind was printed."""
    if any(local is not None for _, local, _ in census):
        return False  # (torch's own `[rankN]:` prefixes are no sign: a trainer srun starts prints them too)
    if events.filter(pl.col("local_rank").is_not_null() | pl.col("run_dir").is_not_null()).height:
        return False
    if events.filter(pl.col("pattern").str.contains(_LAUNCHER_PATTERNS)).height:
        return False
    if not events.get_column("text").str.contains(_SRUN_TASK_LINE).any():
        return False
    return not events.get_column("text").str.contains(_LAUNCHER_BELOW).any()


def _srun_ends_under_tracebacks(frame: pl.DataFrame, census: Census) -> pl.DataFrame:
    """Add `srun_task`: srun reports a task's end as soon as its process exits, which is right after the
    traceback it printed last, so without `--label` an srun end line just under a traceback names that
    traceback's task, and the task is the rank when srun starts the trainer itself. Kept apart from `grank`:
    the task's own lines stay rankless, and srun's report alone does not make the task a failed rank (an
    error every task met alike is no one rank's), so only the verdict's last resort reads it."""
    tasks: list[int | None] = [None] * frame.height
    if _srun_alone_unlabelled(frame, census):
        tracebacks = frame.filter((pl.col("kind") == "traceback") & pl.col("exception_line").is_not_null())
        ends = {(f, n) for f, n in tracebacks.select("file", "exception_line").iter_rows()}
        # an exception line pasted without its frames ends its process's output the same way
        bare = frame.filter((pl.col("kind") == "pattern") & pl.col("text").str.contains(EXCEPTION_LINE))
        ends |= {(f, n) for f, n in bare.select("file", "line").iter_rows()}
        claimed: set[tuple[str, int]] = set()
        for index, (file, line, text) in enumerate(frame.select("file", "line", "text").iter_rows()):
            if "srun: error: " not in text or regex.match(SRUN_TASKS_LINE, text) is None:
                continue
            named = regex.match(_SRUN_TASK_LINE, text)  # one task (`tasks 2-7:` claims the line above, names none)
            if named is not None and regex.search(_SRUN_CRASH, text):
                tasks[index] = int(named.group(1))  # a crash names its own task, wherever its dump was printed
                continue
            # the nearest exception above, if no srun end line came between (that one was its process's end)
            above = next(
                ((file, line - gap) for gap in range(1, _SRUN_END_GAP + 1) if (file, line - gap) in ends), None
            )
            if above is not None and above not in claimed and named is not None:
                tasks[index] = int(named.group(1))
            claimed.update((file, line - gap) for gap in range(1, _SRUN_END_GAP + 1))
    return frame.with_columns(pl.Series("srun_task", tasks, dtype=pl.Int64))


def census_ranks(census: Census, mapping: RankMap) -> set[int]:
    """Global ranks of the writers seen in prefixes (or per-rank files), by the same rules as lines."""
    ranks = (
        _resolve({"rank": rank, "file_rank": None, "local_rank": local, "task": task, "run_dir": None}, mapping, {})[0]
        for task, local, rank in census
    )
    return {rank for rank in ranks if rank is not None}


def resolve_ranks(
    events: pl.DataFrame, census: Census, run_dirs: frozenset[str] = frozenset()
) -> tuple[pl.DataFrame, RankMap]:
    """Add `grank` (resolved global rank) and `rank_inferred` columns. `run_dirs`: the torchrun run directories
    of every input file."""
    mapping = build_rank_map(events, census, run_dirs)
    # Per-rank files: one writer per (run_dir, local_rank) file group, so one rank for all its rows.
    group_rank: dict[tuple[str, int], Counter[int]] = {}
    for row in events.filter(pl.col("run_dir").is_not_null()).iter_rows(named=True):
        rank = row["rank"] if row["rank"] is not None else row["file_rank"]
        if rank is not None and row["local_rank"] is not None and row["task"] is None and row["kind"] != "exit":
            group_rank.setdefault((row["run_dir"], row["local_rank"]), Counter())[rank] += 1
    resolved: list[int | None] = []
    inferred: list[bool] = []
    for row in events.iter_rows(named=True):
        rank, guessed = _resolve(row, mapping, group_rank)
        resolved.append(rank)
        inferred.append(guessed)
    frame = events.with_columns(
        pl.Series("grank", resolved, dtype=pl.Int64), pl.Series("rank_inferred", inferred, dtype=pl.Boolean)
    )
    frame = _srun_ends_under_tracebacks(_ranks_by_srun_task(frame, mapping), census)
    return _ranks_by_ray_worker_table(_ranks_by_nccl_comm(_ranks_by_pid(frame))), mapping


def _ranks_by_srun_task(frame: pl.DataFrame, mapping: RankMap) -> pl.DataFrame:
    """srun's own lines name a task (`srun: error: vm: task 2: Killed`); with one srun task per rank and no
    launcher below, that task is the global rank."""
    if not mapping.task_is_rank:
        return frame
    task = frame.get_column("text").str.extract(_SRUN_TASK_LINE).cast(pl.Int64, strict=False)
    return frame.with_columns(pl.coalesce(pl.col("grank"), task).alias("grank"))


# an exception's own line, `RuntimeError: CUDA out of memory. ...` (a module path allowed before the type)
EXCEPTION_LINE = r"^\s*(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): "
SRUN_TASKS_LINE = r"srun: error: [^:\s]+: tasks? [\d,-]+: "  # an end line for one task or several
_SRUN_TASK_LINE = r"srun: error: [^:\s]+: task (\d+): "  # one task named, whatever signature the line matched
_SRUN_CRASH = r": (?:Segmentation fault|Bus error)"  # srun's report of a task that died of SIGSEGV / SIGBUS
SRUN_TASK_REPORTS = frozenset(
    {"srun-task-exit-code", "srun-task-killed", "srun-task-crashed"}
)  # srun's per-task end lines


def srun_reported_ranks(events: pl.DataFrame, mapping: RankMap) -> set[int]:
    """The ranks srun reported as exited or killed (`srun: error: vm: tasks 0-4: Terminated`), when srun runs
    one task per rank: like torchrun's failure summary, what the launcher saw end."""
    if not mapping.task_is_rank:
        return set()
    reported: set[int] = set()
    rows = events.filter(pl.col("pattern").is_in(list(SRUN_TASK_REPORTS)))
    for fields in rows.get_column("fields").to_list():
        reported |= parse_ranks(json.loads(fields or "{}").get("tasks", ""))
    return reported


def _ranks_by_nccl_comm(frame: pl.DataFrame) -> pl.DataFrame:
    """NCCL_DEBUG=INFO's `host:pid:tid [dev] NCCL INFO comm 0x.. rank R nranks N` names each process's rank;
    in the job-wide communicator (the largest N) that is the global rank, which then belongs to every
    line of that host:pid (the WARN lines NCCL prints without a rank)."""
    with_pid = frame.filter(pl.col("pid").is_not_null() & (pl.col("kind") == "pattern"))
    if with_pid.is_empty():
        return frame
    owners: dict[tuple[str | None, int], set[int]] = {}
    comms = with_pid.filter(pl.col("pattern") == "nccl-comm-init-rank")
    if not comms.is_empty():
        fields = comms.get_column("fields").str.json_decode()
        comms = comms.with_columns(
            fields.struct.field("nccl_rank").cast(pl.Int64, strict=False).alias("nccl_rank"),
            fields.struct.field("nranks").cast(pl.Int64, strict=False).alias("nranks"),
        )
        world = comms.get_column("nranks").max()
        for row in comms.filter(pl.col("nranks") == world).iter_rows(named=True):
            owners.setdefault((row["host"], row["pid"]), set()).add(row["nccl_rank"])
    rings = with_pid.filter(pl.col("pattern") == "nccl-ring-connection")
    for row in rings.select("host", "pid", "fields").iter_rows(named=True):
        link = json.loads(row["fields"])
        own = link.get("dst") if link.get("dir") == "receive" else link.get("src")
        if own is not None and own.isdigit():
            owners.setdefault((row["host"], row["pid"]), set()).add(int(own))
    # a line of the process that named its own rank (`[Proxy Service 1] ... from rank 1`)
    named = with_pid.filter(
        pl.col("grank").is_not_null() & ~pl.col("pattern").is_in(["nccl-comm-init-rank", "nccl-ring-connection"])
    )
    for row in named.select("host", "pid", "grank").iter_rows(named=True):
        owners.setdefault((row["host"], row["pid"]), set()).add(row["grank"])
    known = {key: ranks.pop() for key, ranks in owners.items() if len(ranks) == 1}
    known.update(_ranks_by_gpu(frame, with_pid, known))
    if not known:
        return frame
    by_process = [
        known.get((host, pid)) if pid is not None else None
        for host, pid in zip(frame.get_column("host").to_list(), frame.get_column("pid").to_list(), strict=True)
    ]
    return frame.with_columns(
        pl.coalesce(pl.col("grank"), pl.Series("by_process", by_process, dtype=pl.Int64)).alias("grank")
    )


def _ranks_by_gpu(
    frame: pl.DataFrame, with_pid: pl.DataFrame, known: dict[tuple[str | None, int], int]
) -> dict[tuple[str | None, int], int]:
    """A process that printed no rank of its own still names its GPU in NCCL's header (`host:pid:tid [0]`);
    its neighbours' ring lines (`3[1e000] -> 2[1d000] via direct shared memory`) name the rank on each GPU of
    the host, by bus id (older NCCL) or CUDA device (newer), and `dev 0(=1d000)` lines pair the two."""
    rank_on: dict[tuple[str | None, str], set[int]] = {}
    bus_of: dict[tuple[str | None, int], str] = {}
    for row in with_pid.select("host", "pattern", "fields").iter_rows(named=True):
        found = json.loads(row["fields"] or "{}")
        if row["pattern"] == "nccl-ring-connection":
            # a link via the network has its other end on another host
            remote = "dst" if found.get("dir") != "receive" else "src"
            for side in ("src", "dst"):
                gpu = found.get(f"{side}_gpu")
                if gpu and found.get(side, "").isdigit() and (found.get("via") != "NET" or side != remote):
                    rank_on.setdefault((row["host"], gpu.lower()), set()).add(int(found[side]))
        elif row["pattern"] == "nccl-comm-init-rank" and found.get("bus_id"):
            bus_of[(row["host"], int(found["cuda_dev"]))] = found["bus_id"].lower()
        elif row["pattern"] == "nccl-p2p-device-bus":
            for pair in ("a", "b"):
                bus_of[(row["host"], int(found[f"dev_{pair}"]))] = found[f"bus_{pair}"].lower()
    if not rank_on:
        return {}
    found_ranks: dict[tuple[str | None, int], int] = {}
    processes = frame.filter(pl.col("pid").is_not_null() & pl.col("device").is_not_null())
    for host, pid, device in processes.select("host", "pid", "device").unique().iter_rows():
        if (host, pid) in known:
            continue
        ranks = rank_on.get((host, str(device)), set()) | rank_on.get((host, bus_of.get((host, device), "")), set())
        if len(ranks) == 1:
            found_ranks[(host, pid)] = ranks.pop()
    return found_ranks


_RAY_WORKER_TABLE = "ray-train-worker-rank"


def _ranks_by_ray_worker_table(frame: pl.DataFrame) -> pl.DataFrame:
    """Ray prefixes a worker's lines with its pid alone (`(RayTrainWorker pid=14161)`); the trainer's list of its
    worker group (`- (ip=…, pid=14161) world_rank=1, …`) says which rank that pid is. A pid listed with two ranks
    (two hosts' processes sharing a number) names neither."""
    table = frame.filter(pl.col("pattern") == _RAY_WORKER_TABLE)
    if table.is_empty():
        return frame
    ranks_of: dict[int, set[int]] = {}
    for fields in table.get_column("fields").to_list():
        found = json.loads(fields or "{}")
        if found.get("worker_pid", "").isdigit() and found.get("world_rank", "").isdigit():
            ranks_of.setdefault(int(found["worker_pid"]), set()).add(int(found["world_rank"]))
    by_pid = {pid: ranks.pop() for pid, ranks in ranks_of.items() if len(ranks) == 1}
    from_table = frame.get_column("pid").replace_strict(by_pid, default=None, return_dtype=pl.Int64)
    return frame.with_columns(pl.coalesce(pl.col("grank"), from_table).alias("grank"))


def _ranks_by_pid(frame: pl.DataFrame) -> pl.DataFrame:
    """Launcher lines name a worker only by pid (`Sending process 7733 closing signal SIGTERM`);
    torchrun's summary says which rank that pid was."""
    known = frame.filter((pl.col("kind") == "exit") & pl.col("pid").is_not_null() & pl.col("grank").is_not_null())
    if known.is_empty():
        return frame
    by_pid = dict(zip(known.get_column("pid").to_list(), known.get_column("grank").to_list(), strict=True))
    pids = frame.get_column("fields").str.extract(r'"pid": "(\d+)"').cast(pl.Int64, strict=False)
    from_pid = pids.replace_strict(by_pid, default=None, return_dtype=pl.Int64)
    return frame.with_columns(pl.coalesce(pl.col("grank"), from_pid).alias("grank"))


def _resolve(
    row: dict[str, object], mapping: RankMap, group_rank: dict[tuple[str, int], Counter[int]]
) -> tuple[int | None, bool]:
    if row["rank"] is not None:
        return row["rank"], False  # type: ignore[return-value]
    if row["file_rank"] is not None:
        return row["file_rank"], False  # type: ignore[return-value]
    local = row["local_rank"]
    if local is None:
        if row["task"] is not None and mapping.task_is_rank:
            return row["task"], False  # type: ignore[return-value]
        return None, False
    if row["run_dir"] is not None and row["task"] is None:
        counter = group_rank.get((row["run_dir"], local))  # type: ignore[arg-type]
        if counter:
            return counter.most_common(1)[0][0], False
    node = _node_key(row["task"], row["run_dir"])  # type: ignore[arg-type]
    if (node, local) in mapping.stream:
        return mapping.stream[(node, local)], False
    if mapping.single_node:
        return local, False  # type: ignore[return-value]
    if node is not None and node[0] == "task" and mapping.per_node:
        return node[1] * mapping.per_node + local, True  # type: ignore[operator]
    return None, False
