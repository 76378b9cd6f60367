"""Strip the prefixes launchers put in front of each line, keeping what they say about the writer.

Real lines stack several prefixes (`0: [default1]:[rank1]: Traceback ...` from srun --label, torchrun
--tee and torch's own rank prefix). Each prefix carries a different identity: srun's is a task id,
torchrun's `[defaultN]` a LOCAL rank, `[rankN]` a GLOBAL rank, pdsh/DeepSpeed and Ray a host. Mixing
them up is the classic way to blame the wrong rank, so they are kept apart here.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

_SRUN_LABEL = regex.compile(r"\s{0,6}(\d{1,6}): ")
_RANK = regex.compile(r"\[rank(\d{1,7})\]: ?")
_RANK_CUT = regex.compile(r"rank(\d{1,7})\]: ")  # `[rankN]: ` that lost its bracket at a paste's first character
# TorchX tailing a replica's log: `role/replica ` before torchrun's old `[local_rank]:` tag
_TORCHX = regex.compile(r"[A-Za-z_][\w-]{0,40}/(\d{1,5}) \[(\d{1,5})\]:")
_ROLE = regex.compile(r"\[([A-Za-z_][A-Za-z_-]{0,30}?)(\d{1,6})\]: ?")
# Ray's tags on forwarded output: a worker's `(Worker pid=1, ip=...)` (an actor's name may hold `/`:
# `(model_worker/12 pid=1)`), or Ray's own daemons (`(raylet)`, `(raylet, ip=...)`, `(gcs_server)`) printing a
# worker that died while starting
# A worker group's actor may carry its rank in its name (NeMo-RL's `(MegatronPolicyWorker[rank=8] pid=1, ip=...)`).
ANSI_CODE = r"\x1b\[[0-9;]*m"  # a terminal colour code (Ray, rich, loguru colour their tags)
# Ray colours the tag when its driver's output looks like a terminal: `\x1b[36m(RayTrainWorker pid=14161)\x1b[0m `
_RAY = regex.compile(
    r"\((?:(?:[A-Za-z_][\w./]*(?:\[rank=(?P<rank>\d{1,6})\])?\s+)?pid=(?P<pid>\d+)|raylet|gcs_server)"
    r"(?:,\s*ip=(?P<ip>[0-9a-fA-F.:]+))?\)(?:" + ANSI_CODE + r")*\s"
)
_COLOUR = regex.compile(f"(?:{ANSI_CODE})+")
# vLLM's multiprocessing executor tags each worker's output with its rank: `(VllmWorker rank=3 pid=4665) `, or
# in later versions its tensor-parallel index when that is the only parallelism: `(Worker_TP0 pid=3259) `
_VLLM_WORKER = regex.compile(
    r"\((?:(?:VllmWorker|Worker)\w* rank=(\d{1,6})|(?:VllmWorker |Worker_)TP(\d{1,4})) pid=\d+\)\s"
)
# SkyPilot's per-node prefix: `(head, rank=0, pid=4773) `, `(worker1, rank=1, pid=...) `; its rank numbers the NODE
_SKYPILOT = regex.compile(r"\([\w-]{1,40}, rank=\d{1,5}, pid=\d+\)\s")
_NEMO = regex.compile(r"\[NeMo ([DIWEC]) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: [^\]]*)?\] ?")
_HOST = regex.compile(r"([a-z0-9][a-z0-9.-]{0,62}): ")
_NCCL_HEADER = regex.compile(r"([\w.<>-]{0,63}):(\d+):\d+ \[(\d+)\] ")  # host may be redacted to nothing
# docker compose / SageMaker local mode: `gsb2fnng0z-algo-1-6pcq6 | msg`; SageMaker's toolkit quotes the
# user's last error as `ErrorMessage "RuntimeError: ..."`
_COMPOSE = regex.compile(r"([\w.-]{1,63}) +\| ")
_SAGEMAKER_QUOTE = regex.compile(r'ErrorMessage "')
_HOST_LOCAL = regex.compile(
    r"\[([a-z][\w.-]{0,62}):(\d{1,4})\]: ?"
)  # accelerate --tee style `[gpu187:2]:` (host, local rank)
_QUOTE = regex.compile(r"> ")
# torchelastic printing error.json into the log: `      "message": "RuntimeError: ...",`
# (or a YAML dump of the same record: `      message: 'AssertionError: ...'`)
_JSON_MESSAGE = regex.compile(r'\s*(?:"message": "|message: \')(?=[A-Za-z_][\w.]*(?:Error|Exception)\b)')
# Determined AI: `<>        [2021-12-07 10:42:15] 1d0cefc1 [rank=1] || msg`
# (the `<container>` field and the rank field are left out when a trial's logs are exported: `[ISO time] 1d0cefc1 || `)
_DETERMINED = regex.compile(r"(?:<[^>]{0,40}>\s+)?\[[^\]]{1,40}\]\s+\S{1,40}\s+(?:\[rank=(\d{1,7})\] )?\|\| ")
# ...and as its web UI copies a trial's log: `[<timestamp or nothing>] [rank=0] msg`
_DETERMINED_UI = regex.compile(r"\[[^\]]{0,40}\] \[rank=(\d{1,7})\] ")
# Markdown bold a poster put around the line that matters (`[rank1]: **RuntimeError: ...**`)
_BOLD = regex.compile(r"\*\*(?=[^\s*])")
# ...or Markdown italics around the whole line (`_subprocess.CalledProcessError: ... SIGKILL: 9>._`)
_ITALIC = regex.compile(r"_[A-Za-z][^_].*[^_\s]_")
# ...or Markdown inline code around the whole line (`` `torch.distributed.DistStoreError: ...` ``)
_INLINE_CODE = regex.compile(r"`[A-Za-z][^`]{3,}[^`\s]`")
# pytest's report of an exception a test raised: `E` and seven spaces before each line of it (the traceback a
# spawned process sent back included), so the lines keep their own indentation behind it
_PYTEST = regex.compile(r"E(?: {7}|$)")
# `[stderr]ModuleNotFoundError: ...`, and a launcher relaying a child's streams as `stderr: Traceback ...`
_BARE_STREAM = regex.compile(r"\[(?:stdout|stderr)\] ?|(?:stdout|stderr): ")
# vLLM's logger: `ERROR 04-07 00:57:46 ray_utils.py:45] msg`
# (vLLM v1 puts the location in brackets: `ERROR 06-03 17:19:18 [core.py:1140] msg`)
_VLLM = regex.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\] ")
_STREAM_TAG = regex.compile(r"([\w.-]{1,63}) \[(?:stdout|stderr)\] ")  # log collectors: `node-3 [stderr] ...`
# Python logging / rich log columns: `ERROR    __main__   msg` and ` WARNING  msg   api.py:699`
_LEVEL = regex.compile(r" ?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) {2,}(?:[\w.<>-]+ {2,})?")
# mpirun --tag-output `[1,3]<stderr>:`, horovodrun's `[3]<stderr>:` and SageMaker's `[1,mpirank:3,algo-1]<stderr>:`
# (jobid, rank, host)
_MPI_TAG = regex.compile(r"\[(?:\d+,)?(?:mpirank:)?(\d+)(?:,([\w.-]+))?\]<std(?:out|err)>: ?")
# ...and the bare `[3] ` of launchers that tag each line with the rank alone (horovodrun, an mpirun wrapper), at
# a line's start. The same shape is NCCL's header with `host:pid:tid` cut off (`[3] NCCL INFO ...`: a device) and
# Open MPI's signal handler (`[82362] Signal: Segmentation fault (11)`: a pid), so text like theirs behind it
# leaves the tag unread.
_BARE_RANK_TAG = regex.compile(r"\[(\d{1,6})\](?: |$)")
_NOT_A_RANK_AFTER = regex.compile(r"NCCL |[\w/.-]+:\d+ NCCL |\*\*\*|Signal|Failing at address|\[ ?\d+\] ")
# a wall-clock stamp a log collector or logging formatter put in front: `2024-11-20 14:37:16 [rank3]: ...`; a wide gap
# after it is a column (CloudWatch's export pads to one), not the indent of a traceback line; a container runtime's
# stamp may end in a tab (`2021-07-26T14:09:27.84205038Z\t  File ...`)
_STAMP = regex.compile(
    r"\[?\d{4}([-/])\d\d\1\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?: ?(?:Z|[+-]\d\d:?\d\d))?\]?[,:]?(?: {10,}| |\t)"
)
_DMESG = regex.compile(r"\[\s*\d+\.\d+\] ")
# Open MPI's own messages carry the writing process as `[host:pid] ` (`[g2-nasp:24252] *** An error occurred in ...`)
_OMPI_PROCESS = regex.compile(r"\[([\w.-]{1,63}):(\d{1,8})\] ")
# the ROCm runtime's (CLR) log header: `:0:rocdevice.cpp            :2984: 13356666806077 us: [pid:1843  tid:0x7fb7] `
_ROCM_CLR = regex.compile(r":\d:[\w.]+\s*:\d+\s*: \d+ us: (?:\[pid:(\d+)\s+tid:0x[0-9a-f]+\] )?")
# Ray's C++ log lines: `[2024-07-25 10:46:00,050 E 24036 24036] logging.cc:440: msg`
_RAY_CPP = regex.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ([DIWEF]) \d+ \d+\] [\w./-]+:\d+: ")
# mpirun --timestamp-output and other ctime() stamps: `Fri Aug 11 12:31:45 2023`, glued to the next prefix
_CTIME = regex.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d \d{4}:? ?"
)
# a logging format with the rank as its first column: ParlAI's `rank:  3 | 2022-04-03 18:44:26,615 CRITICAL | msg`
_RANK_COLUMN = regex.compile(r"rank:\s{0,3}(\d{1,7}) \| ")
# loguru-style columns after a time: `2026-12-01 03:57:40,832 | INFO    | rank1 | module:152 - msg`
_PIPE_LEVEL = regex.compile(r"\| (?:TRACE|DEBUG|INFO|SUCCESS|WARNING|WARN|ERROR|CRITICAL) *\| ")
_PIPE_RANK = regex.compile(r"rank[:=]? ?(\d{1,7}) *\| ")
_LEVEL_COLUMN = regex.compile(r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \| ")
# OLMo's logging header: `CRITICAL [olmo.util:158, rank=0] msg` (the level may be padded)
_SOURCE_RANK = regex.compile(
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s{1,8})?\[[\w.]{1,80}:\d{1,6}, rank=(\d{1,7})\] "
)
# SGLang's per-process logger: `[2025-02-24 14:09:34 TP14] msg`; without DP or PP parts the TP rank is the
# process's rank in the one tensor-parallel group
_SGLANG = regex.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) TP(\d{1,5})(?: EP\d{1,5})?\] ")
# TensorRT-LLM's logger: `[11/18/2025-09:33:30] [TRT-LLM] [RANK 0] [E] msg` (the MPI rank, when it prints one)
_TRTLLM = regex.compile(r"\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[TRT-LLM\](?: \[RANK (\d{1,5})\])? \[[A-Z]\] ")
_BRACKET_LEVEL = regex.compile(r"\[(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\] ")  # `[INFO] OSError: ...`
# a trainer's own logging header of bracketed fields, time first and the rank among them:
# `[2026-12-01 01:08:12,419][tinyasr.data][INFO][rank1] msg`, `[00:31:08.223][tinyrl.trainer][INFO][r0] msg`
# (the census of ranks in ingest.py looks for the same header at line starts in a file's bytes)
BRACKET_FIELDS_RANK = (
    r"\[(?:\d{4}-\d\d-\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d{1,6})?\](?:\[[^\[\]\n]{1,60}\]){0,4}?\[(?:rank|r)=?(\d{1,7})\] "
)
_BRACKET_FIELDS_RANK = regex.compile(BRACKET_FIELDS_RANK)
_MAX_STACK = 6
_SOURCE_SUFFIXES = (".py", ".sh", ".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".so")
# c10 / glog headers (month without a leading zero in some builds: `[E817 ...`):
# `[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] `, torchelastic's
# `E1129 16:48:08.288000 15679 torch/.../api.py:1028] ` and the old `[E ProcessGroupNCCL.cpp:916] `.
# A trainer's own glog-style header may carry its rank and world size after the pid:
# `I1201 06:43:05.137 597 [1/2] train.py:41] msg` (ingest.py looks for that header at line starts in a file's bytes
# to give the file's unlabelled lines its one rank).
GLOG_RANK_HEADER = r"[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)? \d+ \[(\d{1,6})/\d{1,6}\] "
_GLOG = regex.compile(
    r"\[?[IWEF](?:\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)?(?: \d+)?(?: \[(?P<rank>\d{1,6})/\d{1,6}\])? )?\s?[\w/.<>-]+:\d+\] "
)
_PROGRAMS = ("slurmstepd", "slurmd", "slurmctld", "srun", "sbatch", "salloc", "scancel", "kernel", "systemd")


@dataclass(frozen=True)
class Prefix:
    """Identity a line's prefixes revealed; None where the prefix said nothing about it."""

    rank: int | None = None
    local_rank: int | None = None
    task: int | None = None
    host: str | None = None
    level: str | None = None
    time: str | None = None
    pid: int | None = None  # from NCCL's `host:pid:tid [dev]` header or Ray's `(Worker pid=N)`: ties lines to a process
    device: int | None = None  # the CUDA device in that header: ties a process to a GPU's bus id

    @property
    def stream_key(self) -> tuple[object, ...]:
        """Lines with equal keys came from the same writer; used to untangle interleaved tracebacks."""
        return (self.rank, self.local_rank, self.task, self.host)


EMPTY = Prefix()


def _looks_like_host(token: str) -> bool:
    # Exception types, module paths and programs also end in ": ". Node names are lower-case and carry a
    # digit or a hyphen (node001, gpu-a-12, 10.0.0.2, worker-1); module paths such as
    # `torch.distributed.elastic.multiprocessing.api: [ERROR] ...` carry neither. slurmstepd names itself
    # after the node (`slurmstepd-vm: error: ...`) and argparse after the script (`train.py: error: ...`).
    if token.startswith(_PROGRAMS) or token.endswith(_SOURCE_SUFFIXES):
        return False
    return any(c.isdigit() or c == "-" for c in token) and not token.endswith(".")


def split_prefix(line: str) -> tuple[Prefix, str]:
    """Return the identity the line's prefixes carry and the text behind them."""
    rank = local_rank = task = pid = device = None
    host = level = time = None
    pos = 0
    for _ in range(_MAX_STACK):
        if line.startswith("\x1b", pos) and (m := _COLOUR.match(line, pos)) is not None:
            pass
        elif (m := _RANK.match(line, pos)) is not None:
            if rank is not None and local_rank is None:
                # torchrun --role rank (torchtitan's scripts) labels LOCAL ranks `[rankN]:`; torch's own `[rankM]:`
                # inside it is the global rank: `[rank0]:[rank8]: Traceback ...` on a second node
                local_rank, rank = rank, int(m.group(1))
            else:
                rank = int(m.group(1)) if rank is None else rank
        elif pos == 0 and (m := _RANK_CUT.match(line, pos)) is not None:
            rank = int(m.group(1))
        elif pos == 0 and (m := _TORCHX.match(line, pos)) is not None:
            local_rank = int(m.group(2))  # the replica is a node, but not one a rank's host names
        elif (m := _ROLE.match(line, pos)) is not None:
            local_rank = int(m.group(2)) if local_rank is None else local_rank
        elif pos == 0 and (m := _SRUN_LABEL.match(line, pos)) is not None:
            task = int(m.group(1))
        elif pos == 0 and (m := _SKYPILOT.match(line, pos)) is not None:
            # SkyPilot's node prefix (its rank numbers the node): stripped, and nothing after it is read as a
            # prefix, so a node's torchrun local ranks are not taken for the job's global ranks
            pos = m.end()
            break
        elif (m := _VLLM_WORKER.match(line, pos)) is not None:
            rank = int(m.group(1) or m.group(2)) if rank is None else rank
        elif (m := _RAY.match(line, pos)) is not None:
            host = host or m.group("ip")
            if pid is None and m.group("pid"):
                pid = int(m.group("pid"))  # the worker's process: its lines share the rank one of them names
            if rank is None and m.group("rank"):
                rank = int(m.group("rank"))
        elif (m := _NEMO.match(line, pos)) is not None:
            level, time = m.group(1), m.group(2)
        elif (m := _GLOG.match(line, pos)) is not None:
            level, time = line[pos : pos + 2].strip("[")[:1], m.group(0)
            rank = int(m.group("rank")) if rank is None and m.group("rank") else rank
        elif (m := _NCCL_HEADER.match(line, pos)) is not None:
            host, pid, device = host or m.group(1) or None, int(m.group(2)), int(m.group(3))
        elif pos == 0 and (m := _COMPOSE.match(line, pos)) is not None and _looks_like_host(m.group(1)):
            host = m.group(1)
        elif (m := _SAGEMAKER_QUOTE.match(line, pos)) is not None:
            pass
        elif (m := _HOST_LOCAL.match(line, pos)) is not None:
            host, local_rank = host or m.group(1), local_rank if local_rank is not None else int(m.group(2))
        elif (
            pos == 0
            and (m := _DETERMINED.match(line, pos)) is not None
            or (m := _DETERMINED_UI.match(line, pos)) is not None
        ):
            rank = int(m.group(1)) if m.group(1) else rank
        elif pos == 0 and line.startswith("> ") and (m := _QUOTE.match(line, pos)) is not None:
            pass  # a log quoted in a Markdown issue comment
        elif (
            pos == 0
            and line.startswith("E")
            and (m := _PYTEST.match(line, pos)) is not None
            or (m := _BARE_STREAM.match(line, pos)) is not None
        ):
            pass
        elif (m := _VLLM.match(line, pos)) is not None:
            level = level or m.group(0)[:1]
        elif pos == 0 and (m := _STREAM_TAG.match(line, pos)) is not None:
            host = m.group(1)
        elif time is not None and level is None and (m := _PIPE_LEVEL.match(line, pos)) is not None:
            level = m.group(0)[2:3]
        elif (
            time is not None
            and rank is None
            and (m := _PIPE_RANK.match(line, pos)) is not None
            or pos == 0
            and (m := _RANK_COLUMN.match(line, pos)) is not None
        ):
            rank = int(m.group(1))
        elif rank is not None and (m := _LEVEL_COLUMN.match(line, pos)) is not None:
            level = level or m.group(0)[:1]
        elif (m := _MPI_TAG.match(line, pos)) is not None:
            rank, host = int(m.group(1)), host or m.group(2)
        elif (
            pos == 0
            and (m := _BARE_RANK_TAG.match(line, pos)) is not None
            and not _NOT_A_RANK_AFTER.match(line, m.end())
        ):
            rank = int(m.group(1))
        elif (m := _BRACKET_LEVEL.match(line, pos)) is not None:
            level = level or m.group(0)[1:2]
        elif (m := _BRACKET_FIELDS_RANK.match(line, pos)) is not None:
            rank = int(m.group(1)) if rank is None else rank
        elif (m := _RAY_CPP.match(line, pos)) is not None:
            level, time = level or m.group(1), time or m.group(0)
        elif (m := _SGLANG.match(line, pos)) is not None:
            rank, time = int(m.group(2)) if rank is None else rank, time or m.group(1)
        elif (m := _TRTLLM.match(line, pos)) is not None:
            rank = int(m.group(1)) if rank is None and m.group(1) else rank
        elif (m := _CTIME.match(line, pos)) is not None or (m := _STAMP.match(line, pos)) is not None:
            time = time or m.group(0)
        elif (m := _SOURCE_RANK.match(line, pos)) is not None:
            rank = int(m.group(1)) if rank is None else rank
        elif (m := _LEVEL.match(line, pos)) is not None:
            level = level or m.group(0).strip()[:1]
        elif (m := _DMESG.match(line, pos)) is not None:
            pass
        elif pos == 0 and (m := _OMPI_PROCESS.match(line, pos)) is not None and _looks_like_host(m.group(1)):
            host, pid = m.group(1), int(m.group(2))
        elif (m := _ROCM_CLR.match(line, pos)) is not None:
            pid = pid if pid is not None or not m.group(1) else int(m.group(1))
        elif (m := _HOST.match(line, pos)) is not None and _looks_like_host(m.group(1)):
            host = host or m.group(1)
        else:
            break
        pos = m.end()
    text = line[pos:]
    bold_end = text.rstrip().endswith("**") and not text.rstrip().endswith("***")
    if (m := _BOLD.match(text)) is not None and bold_end and len(text.rstrip()) > 4:
        text, pos = text[m.end() :].rstrip()[:-2], pos + m.end()
    elif _ITALIC.fullmatch(text.rstrip()) is not None or _INLINE_CODE.fullmatch(text.rstrip()) is not None:
        text, pos = text.rstrip()[1:-1], pos + 1
    if task is not None and text.startswith(("slurmstepd", "srun: ")):
        task = None  # srun routes its own and slurmstepd's messages through a task's label: not that task's output
    if (m := _JSON_MESSAGE.match(text)) is not None:
        quote = text[m.end() - 1]  # the quote that opened the value closes it
        text = text[m.end() :].rstrip().removesuffix(",").removesuffix(quote)
        pos = max(pos, 1)
    if pos == 0:
        return EMPTY, line
    return Prefix(rank, local_rank, task, host, level, time, pid, device), text


def strip_prefix(line: str) -> str:
    return split_prefix(line)[1]


# a torchrun prefix, or the launcher's summary header written straight after a worker's last line that lost
# its newline (`RuntimeError: Tensors must be CUDA and densetorch.distributed.elastic...ChildFailedError:`)
_GLUE = regex.compile(
    r"\[(?:default|rank)\d{1,7}\]:|(?<=[^\s:])torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError:"
    # a terminal paste whose line breaks became a run of spaces: the exception line after the last code line
    r"|(?<=\S {20,})(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): "
    # ...or an mpirun tag after the padding a terminal added to fill its width: the next record's start
    r"|(?<=\S {20,})\[(?:\d+,)?\d+\]<std(?:out|err)>:"
    # ...or whose line breaks became single spaces: torchelastic's glog header starts each of the agent's records
    r"|(?<=\S )[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [\w/.-]+:\d+\] "
)


# a paste whose line breaks were lost, each line still starting with its srun label (`... opts) 10: torch.distributed.
# DistBackendError: ...`): the label seen again and again inside one line marks where lines began
_LABEL_INSIDE = regex.compile(r"(?<=\S) (\d{1,5}): ")
_EXCEPTION_AHEAD = regex.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): ")
_FLATTENED_LABELS = 3  # one label this often inside a line is a flattened paste, not a number in a message


def _flattened_label_cuts(line: str) -> list[int]:
    """Where an exception line began, in a line that is several srun-labelled lines run together."""
    found = list(_LABEL_INSIDE.finditer(line))
    if len(found) < _FLATTENED_LABELS:
        return []
    label = max({m[1] for m in found}, key=lambda v: sum(m[1] == v for m in found))
    if sum(m[1] == label for m in found) < _FLATTENED_LABELS:
        return []
    return [m.start() + 1 for m in found if m[1] == label and _EXCEPTION_AHEAD.match(line, m.end())]


def split_glued(line: str) -> list[tuple[int, str]]:
    """(offset, piece) for each writer's output in one physical line.

    Ranks writing to one pipe without line buffering glue their output together
    (`...step 9[default1]:[rank1]: Traceback ...`); a torchrun prefix that does not directly follow
    another prefix starts a new writer's piece.
    """
    own_prefix_end = len(line) - len(split_prefix(line)[1])
    cuts = [m.start() for m in _GLUE.finditer(line, own_prefix_end) if m.start() > 0 and line[m.start() - 1] != ":"]
    cuts = sorted({*cuts, *_flattened_label_cuts(line)})
    if not cuts:
        return [(0, line)]
    bounds = [0, *cuts, len(line)]
    return [(a, line[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if line[a:b].strip()]
