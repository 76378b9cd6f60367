"""Pick the root cause: the earliest root-role failure across all ranks and nodes.

Every failure line, traceback, error.json and torchrun exit record becomes a candidate with a role. The
same failure seen on many ranks (or seen four times for one rank: console copy, per-rank file,
error.json, summary) is one incident with a rank set. Symptoms (timeouts, peer-closed, SIGTERM
teardown, launcher tracebacks) never win; when nothing but symptoms exists the job hung or lost its
network, and the hang analysis names suspects instead.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

import polars as pl
import regex

from diagnose.candidates import GENERIC_PRIORITY, WATCHDOG_ABORT, Candidate, Incident, Row, order_key
from diagnose.patterns import Pattern
from diagnose.refine import (
    CRASH_AFTERMATH,
    SIGNAL_DEATH_PRIORITY,
    refine_bare_asserts,
    refine_by_cut_traceback,
    refine_by_phase,
    refine_by_timeout_detail,
    refine_chained_causes,
    refine_compile_wrappers,
    refine_crash_after_nccl_failure,
    refine_gdb_backtraces,
    refine_launcher_error_file,
    refine_launcher_reports,
    refine_native_crashes,
    refine_retried_lookups,
    refine_skipped_ib_devices,
    refine_wrapped_exceptions,
)
from diagnose.tracebacks import SIGNAL_NAMES, status_signal

_HANG_PATTERNS = ("nccl-watchdog-timeout", "gloo-timeout")
_IGNORED_NOTICE = "exception-ignored-notice"
# Signals a launcher or scheduler sends to stop survivors; any other signal death is a rank's own failure.
TEARDOWN_SIGNALS = {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"}


def best_pattern_per_line(events: pl.DataFrame, patterns: dict[str, Pattern]) -> dict[tuple[str, int], Row]:
    """When one line matches several signatures, the highest priority wins (specific beats generic). A physical
    line that is several records glued together (a paste whose line breaks were lost: an exception, then the
    launcher's teardown records) holds several messages: there an error beats the symptoms printed after it."""
    best: dict[tuple[str, int], Row] = {}
    for row in events.filter(pl.col("kind") == "pattern").iter_rows(named=True):
        pattern = patterns.get(row["pattern"])
        if pattern is None:
            continue
        key = (row["file"], row["line"])
        current = best.get(key)
        if current is None:
            best[key] = row
            continue
        held = patterns[current["pattern"]]
        if current["text"] != row["text"] and (held.role == "root") != (pattern.role == "root"):
            if pattern.role == "root":
                best[key] = row
        elif pattern.priority > held.priority:
            best[key] = row
    return best


def _time_by_rank(events: pl.DataFrame) -> dict[tuple[int | None, int], datetime]:
    """A rank's failure time from torchrun's summary or error.json: tracebacks themselves carry none.

    Keyed by (attempt, rank). A line that names no attempt (the console copy) borrows a time under
    (None, rank) only when the rank failed in one attempt: after a restart the same rank fails again, and
    which failure a console traceback belongs to is then unknown (its per-attempt copy carries the time).
    """
    times: dict[tuple[int | None, int], datetime] = {}
    attempts: dict[int, set[int]] = defaultdict(set)
    for row in events.filter(pl.col("kind").is_in(["exit", "error_json"]) & pl.col("ts").is_not_null()).iter_rows(
        named=True
    ):
        rank = row["grank"]
        if rank is None:
            continue
        if row["attempt"] is not None:
            attempts[rank].add(row["attempt"])
        for key in {(row["attempt"], rank), (None, rank)}:
            if key not in times or row["ts"] < times[key]:
                times[key] = row["ts"]
    for rank, seen in attempts.items():
        if len(seen) > 1:
            del times[(None, rank)]
    return times


def _raised_catch_all(pattern: Pattern) -> bool:
    """A last-resort context signature that names a category (the GPU, memory, the communicator) in an error."""
    return (
        pattern.priority < GENERIC_PRIORITY
        and pattern.severity in ("error", "critical")
        and pattern.category != "unknown"
    )


def build_candidates(events: pl.DataFrame, patterns: dict[str, Pattern]) -> list[Candidate]:
    best = best_pattern_per_line(events, patterns)
    rank_time = _time_by_rank(events)
    candidates: list[Candidate] = []
    covered: set[tuple[str, int]] = set()

    def make(row: Row, pattern: Pattern | None, text: str, **extra: Any) -> Candidate:
        ts = row["ts"] or rank_time.get((row["attempt"], row["grank"])) or rank_time.get((None, row["grank"]))
        fields = json.loads(row["fields"]) if row.get("fields") and pattern else {}
        return Candidate(
            pattern=pattern,
            role=pattern.role if pattern else "root",
            category=pattern.category if pattern else "code",
            subcategory=pattern.subcategory if pattern else None,
            priority=pattern.priority if pattern else 0,
            text=text,
            rows=[row],
            rank=row["grank"],
            host=row["host"],
            ts=ts,
            file=row["file"],
            line=row["line"],
            fields=fields,
            rank_inferred=bool(row.get("rank_inferred")),
            **extra,
        )

    for row in events.filter(pl.col("kind").is_in(["traceback", "error_json"])).iter_rows(named=True):
        if not row["exception"]:
            continue
        line = row["exception_line"] if row["kind"] == "traceback" else row["line"]
        matched = best.get((row["file"], line))
        if matched is not None:
            covered.add((row["file"], line))
        pattern = patterns[matched["pattern"]] if matched is not None else None
        source = {**row, "fields": matched["fields"] if matched is not None else None, "line": line}
        if source["grank"] is None and matched is not None:
            source["grank"] = matched["grank"]  # the exception line itself named the rank (`[Rank 1] ...`)
        raised = make(
            source,
            pattern,
            row["exception"],
            code_file=row["code_file"],
            code_line=row["code_line"],
            from_traceback=True,
            phase=json.loads(row["fields"] or "{}").get("phase") or None,
        )
        if pattern is not None and pattern.role == "context" and _raised_catch_all(pattern):
            raised.role = "root"  # a raised exception whose words only a catch-all knows is still the failure
        if (best.get((row["file"], row["line"] - 1)) or {}).get("pattern") == _IGNORED_NOTICE:
            raised.role = "symptom"  # printed under `Exception ignored in:` (a finaliser, shutdown): dropped by Python
        candidates.append(raised)
    candidates.extend(_raising_statements(events, best, patterns, make))
    inside = _traceback_bodies(events)
    for key, row in best.items():
        # a source line quoted inside a traceback (`raise RuntimeError(f"NCCL error: ...")`) is code, not a log line
        quoted = any(a < key[1] < b for a, b in inside.get(key[0], ())) or _is_source_line(row["text"])
        if key not in covered and not (quoted and patterns[row["pattern"]].role != "context"):
            candidates.append(make(row, patterns[row["pattern"]], row["text"]))
    refine_bare_asserts(candidates)
    refine_skipped_ib_devices(candidates)
    refine_native_crashes(candidates)
    refine_crash_after_nccl_failure(candidates)
    refine_gdb_backtraces(candidates)
    refine_launcher_reports(candidates)
    refine_launcher_error_file(candidates)
    refine_retried_lookups(candidates)
    candidates.extend(_duplicate_ranks(candidates))
    candidates.extend(_shared_gpus(candidates, patterns.get(_DUPLICATE_GPU)))
    refine_by_phase(candidates)
    refine_by_timeout_detail(candidates)
    refine_compile_wrappers(candidates)
    refine_wrapped_exceptions(candidates)
    refine_by_cut_traceback(candidates, _cut_tracebacks(events))
    refine_chained_causes(candidates)
    candidates.extend(_exit_candidates(events, candidates))
    return candidates


RAISING_STATEMENT = regex.compile(r"(?:raise|assert)\b")
_CUT_BODY = 200  # lines a cut traceback's frames may span


def _raising_statements(
    events: pl.DataFrame,
    best: dict[tuple[str, int], Row],
    patterns: dict[str, Pattern],
    make: Callable[[Row, Pattern, str], Candidate],
) -> list[Candidate]:
    """A traceback cut before its exception line still prints the statement that raised
    (`raise Exception("Could not find the transformer layer class to wrap in the model.")`): a root signature on
    that statement names the failure the missing line would have."""
    cut = [
        (row, source)
        for row in cut_tracebacks(events).iter_rows(named=True)
        if RAISING_STATEMENT.match(source := json.loads(row["fields"] or "{}").get("source") or "")
    ]
    if not cut:
        return []
    by_text: dict[tuple[str, str], list[tuple[int, Row]]] = defaultdict(list)
    for (file, line), hit in best.items():
        by_text[(file, hit["text"].strip())].append((line, hit))
    found = []
    for row, source in cut:
        hit = next((h for line, h in by_text[(row["file"], source)] if 0 < line - row["line"] <= _CUT_BODY), None)
        if hit is not None and patterns[hit["pattern"]].role == "root":
            grank = hit["grank"] if hit["grank"] is not None else row["grank"]
            found.append(make({**hit, "grank": grank}, patterns[hit["pattern"]], source))
    return found


def cut_tracebacks(events: pl.DataFrame) -> pl.DataFrame:
    """Tracebacks whose exception line is not in the logs (a paste cut short before it)."""
    return events.filter((pl.col("kind") == "traceback") & pl.col("exception").is_null())


def _cut_tracebacks(events: pl.DataFrame) -> list[tuple[str, int, str | None, int | None]]:
    """Cut tracebacks with the phase their frames show and the rank that printed them."""
    rows = cut_tracebacks(events).select("file", "line", "fields", "grank").iter_rows(named=True)
    return [(r["file"], r["line"], json.loads(r["fields"] or "{}").get("phase") or None, r["grank"]) for r in rows]


def signal_subcategory(signal: str) -> str:
    """SIGSEGV -> segfault, SIGKILL -> sigkill: the subcategory a signal death is reported under."""
    return {"SIGSEGV": "segfault"}.get(signal, signal.lower())


def _traceback_bodies(events: pl.DataFrame) -> dict[str, list[tuple[int, int]]]:
    """(header line, exception line) of every traceback, per file: the frames and code lines between."""
    bodies: dict[str, list[tuple[int, int]]] = {}
    rows = events.filter((pl.col("kind") == "traceback") & pl.col("exception_line").is_not_null())
    for row in rows.select("file", "line", "exception_line").iter_rows(named=True):
        bodies.setdefault(row["file"], []).append((row["line"], row["exception_line"]))
    return bodies


_IPYTHON_SOURCE = regex.compile(r"\s+(?:-*>\s*)?\d+\s{2,}\S")
# IPython's traceback header: the exception's type, padded, then the header; its message comes at the end
_IPYTHON_HEADER = regex.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*\s{2,}Traceback \(most recent call last\)")
_UNINDENTED_RAISE = regex.compile(r"raise [A-Za-z_][\w.]*(?:\(|\s*$)|assert .+, ")


def _is_source_line(text: str) -> bool:
    """An indented `raise ...` is a traceback quoting source code, even when the Traceback header was cut off;
    so is IPython's numbered listing (`    294     'Please set ...'`, `--> 295     raise ...`), and a
    `raise Error(` or `assert cond, "message"` at the start of a line, from a paste that lost the traceback's
    indentation. IPython's header line (`ValueError      Traceback (most recent call last)`) only announces the
    exception its last line prints."""
    if not text[:1].isspace() and not text.startswith("-"):
        return _UNINDENTED_RAISE.match(text) is not None or _IPYTHON_HEADER.match(text) is not None
    return text.lstrip().startswith(("raise ", "return ", "assert ")) or _IPYTHON_SOURCE.match(text) is not None


_RANK_START = "duplicate-global-rank"


_COMM_RANK, _DUPLICATE_GPU = "nccl-comm-init-rank", "nccl-duplicate-gpu"


def _shared_gpus(candidates: list[Candidate], duplicate_gpu: Pattern | None) -> list[Candidate]:
    """Two ranks of one communicator on the same host and the same GPU bus id (NCCL_DEBUG=INFO's comm lines) is
    NCCL's duplicate-GPU misuse even where its own WARN is not in the logs: the second such line becomes a root
    under the duplicate-GPU signature."""
    if duplicate_gpu is None or any(c.pattern is not None and c.pattern.id == _DUPLICATE_GPU for c in candidates):
        return []  # (a user library without the signature, or NCCL's own WARN says it already)
    seen: dict[tuple[str | None, str, str], str] = {}
    for c in sorted(candidates, key=lambda c: (c.file, c.line)):
        if c.pattern is None or c.pattern.id != _COMM_RANK or not c.fields.get("bus_id"):
            continue
        key = (c.host, c.fields["bus_id"], c.fields.get("nranks", ""))
        first_rank = seen.setdefault(key, c.fields.get("nccl_rank", ""))
        if first_rank != c.fields.get("nccl_rank", ""):
            return [
                replace(
                    c,
                    pattern=duplicate_gpu,
                    role="root",
                    category=duplicate_gpu.category,
                    subcategory=duplicate_gpu.subcategory,
                    priority=50,
                    rank=None,
                )
            ]
    return []


def _duplicate_ranks(candidates: list[Candidate]) -> list[Candidate]:
    """A global rank started twice in one log is a misconfigured launch (and the reason a job then hangs in
    init): the first repeated start line becomes a root."""
    starts: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
    for c in candidates:
        if c.pattern is not None and c.pattern.id == _RANK_START and c.fields.get("global_rank"):
            starts[(c.file, c.fields["global_rank"])].append(c)
    repeated = sorted((group[1] for group in starts.values() if len(group) > 1), key=lambda c: c.line)
    if not repeated:
        return []
    first = repeated[0]
    # its own text, so it is not grouped with the ordinary start lines
    return [replace(first, role="root", priority=50, rank=None, text=f"started twice: {first.text.strip()}")]


def _exit_candidates(events: pl.DataFrame, others: list[Candidate]) -> list[Candidate]:
    """Signal deaths from torchrun's summary: SIGKILL/SIGSEGV with no error of the rank's own is a root."""
    explained = {c.rank for c in others if c.role == "root" and c.rank is not None}
    timed_out = {c.rank for c in others if c.role == "symptom" and c.rank is not None}
    # where a collective timeout was logged: a SIGABRT the launcher records after one in the same file is the
    # watchdog taking its process down (torchrun ends the others within seconds of a real crash, before any
    # collective could time out)
    timeouts = [(c.file, c.line) for c in others if c.role == "symptom" and c.category == "hang"]
    # a crash line already read as the consequence of another failure (refine_crash_after_nccl_failure)
    consequences = {(c.file, c.line) for c in others if c.subcategory == CRASH_AFTERMATH}
    seen: set[int | None] = set()
    out = []
    rows = exit_rows(events)
    # torchrun SIGTERMs the survivors of the first failure and SIGKILLs those that do not stop in time: a
    # signal death well after the first recorded failure is that teardown, not a cause of its own.
    failure_times = [r["ts"] for r in rows if r["ts"] is not None and (r["exitcode"] or r["torchrun_root"])]
    first_failure = min(failure_times, default=None)
    for row in rows:
        signal, rank = row["signal"], row["grank"]
        if signal is None or (rank in seen and rank is not None):
            continue
        seen.add(rank)
        late = first_failure is not None and row["ts"] is not None and (row["ts"] - first_failure).total_seconds() > 1
        watchdog_abort = signal == "SIGABRT" and (
            rank in timed_out or any(f == row["file"] and line < row["line"] for f, line in timeouts)
        )
        consequence = (row["file"], row["line"]) in consequences
        # an abort of a rank that torchrun did not see fail first, when its "Root Cause (first observed failure)" is
        # another rank that exited with an error code at the same time or before: that rank's exit made this one's
        # watchdog (or NCCL) abort it (a crash by SIGSEGV/SIGBUS/SIGKILL is read as a cause of its own)
        after_root = (
            signal == "SIGABRT"
            and not row["torchrun_root"]
            and any(
                r["torchrun_root"]
                and r["signal"] is None
                and r["file"] == row["file"]
                and r["grank"] != rank
                and (r["ts"] is None or row["ts"] is None or r["ts"] <= row["ts"])
                for r in rows
            )
        )
        if signal not in TEARDOWN_SIGNALS and not late and not watchdog_abort and not consequence and not after_root:
            role = "root" if rank not in explained else "symptom"
        else:
            role = "symptom"
        category, sub = (
            "killed",
            signal_subcategory(signal),
        )
        if watchdog_abort:
            sub = WATCHDOG_ABORT
        elif role == "symptom":
            sub = "teardown"
        out.append(
            Candidate(
                None,
                role,
                category,
                sub,
                SIGNAL_DEATH_PRIORITY if role == "root" else 10,
                f"exitcode {row['exitcode']} ({signal})",
                [row],
                rank,
                row["host"],
                row["ts"],
                row["file"],
                row["line"],
            )
        )
    return out


_SIGNAL_NUMBERS = {name: number for number, name in SIGNAL_NAMES.items()}


def exit_rows(events: pl.DataFrame) -> list[Row]:
    """torchrun summary entries, then exit codes printed on their own (`failed (exitcode: -9) local_rank: 0`)."""
    rows = list(events.filter(pl.col("kind") == "exit").iter_rows(named=True))
    summarised = {(r["grank"], r["exitcode"]) for r in rows}
    for row in events.filter(
        (pl.col("kind") == "pattern")
        & pl.col("fields").str.contains('"exitcode"|"signum"|"exit_signal"|"shell_status"')
    ).iter_rows(named=True):
        fields = json.loads(row["fields"])
        code = fields.get("exitcode") or (f"-{fields['signum']}" if fields.get("signum", "").isdigit() else "")
        status = fields.get("shell_status", "")
        if not code and status.isdigit():  # a shell's or launcher's status: 128 + N is death by signal N
            signum = status_signal(int(status))
            code = f"-{signum}" if signum is not None else status
        if not code and fields.get("exit_signal") in _SIGNAL_NUMBERS:  # a launcher naming the signal, not its number
            code = f"-{_SIGNAL_NUMBERS[fields['exit_signal']]}"
        if not code.lstrip("-").isdigit() or (row["grank"], int(code)) in summarised:
            continue
        signal = SIGNAL_NAMES.get(-int(code)) if int(code) < 0 else None
        rows.append({**row, "exitcode": int(code), "signal": signal})
    return rows


def group_incidents(candidates: list[Candidate]) -> list[Incident]:
    groups: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        groups[candidate.signature].append(candidate)
    return [Incident(group) for group in groups.values()]


def choose_root(incidents: list[Incident]) -> Incident | None:
    """Earliest root incident; ties (or no clock) go to the more specific signature, then file order."""
    roots = all_roots = [i for i in incidents if i.first.role == "root"]
    if not roots:
        return None
    timed = [i for i in roots if i.ts is not None]
    if timed:
        earliest = min(i.ts for i in timed)  # type: ignore[type-var]
        window = [i for i in timed if (i.ts - earliest).total_seconds() <= 1.0]  # type: ignore[operator]
        untimed_better = [i for i in roots if i.ts is None and i.first.priority > max(w.first.priority for w in window)]
        roots = window + untimed_better
        roots = _before_job_end(window, all_roots) or roots
    # A specific signature beats the generic catch-all; a raised exception beats a bare log line of the
    # same moment (the NCCL WARN explains the DistBackendError, but the exception is what was raised);
    # then the more specific signature (slurmstepd prints "CANCELLED" before the oom_kill that caused
    # it), then the earlier line.
    chosen = min(
        roots,
        key=lambda i: (
            i.first.priority < GENERIC_PRIORITY,
            not i.first.from_traceback,
            -i.first.priority,
            i.first.file,
            i.first.line,
        ),
    )
    return (
        _explained_by(chosen, roots)
        or _kernel_assert(chosen, all_roots)
        or _why_worker_died(chosen, all_roots)
        or _store_waited_for(chosen, all_roots)
        or chosen
    )


_RENDEZVOUS_TIMEOUT = "rendezvous-timeout"
_STORE_WAIT = regex.compile(r"waiting for clients\. \d+/\d+ clients joined")


def _store_waited_for(chosen: Incident, roots: list[Incident]) -> Incident | None:
    """The rendezvous store's server timing out "waiting for clients" waited for processes that never
    connected; an error printed above it in the same output (without a clock, so the time window could not
    order it) is what kept a client away: that process failed first."""
    first = chosen.first
    if first.pattern is None or first.pattern.id != _RENDEZVOUS_TIMEOUT or not _STORE_WAIT.search(first.text):
        return None
    above = [
        i
        for i in roots
        if i is not chosen and i.first.file == first.file and i.first.line < first.line and i.first.ts is None
    ]
    return min(above, key=lambda i: i.first.line, default=None)


_JOB_END = ("slurm-time-limit", "slurm-cancelled")


def _before_job_end(window: list[Incident], roots: list[Incident]) -> list[Incident]:
    """When the earliest timed event is SLURM ending the job (a time limit, a cancel), a specific error without
    a clock happened before it: above it in the same file, or in another of the job's files (a per-task file),
    since the end of the job is the last thing a job does. The job failed, then sat until the limit (a node whose
    environment lacks the interpreter, while the others wait at the rendezvous)."""
    if not all(w.first.pattern is not None and w.first.pattern.id in _JOB_END for w in window):
        return []
    return [
        i
        for i in roots
        if i.ts is None
        and i.first.priority >= GENERIC_PRIORITY
        and any(i.first.file != w.first.file or i.first.line < w.first.line for w in window)
    ]


_UNEXPLAINED_DEATHS = ("ray-worker-died",)


def _why_worker_died(chosen: Incident, roots: list[Incident]) -> Incident | None:
    """Ray reports that a worker died "by an unexpected system error" without saying why; an error of its
    own in the logs (vLLM's illegal memory access, an OOM) is why, even when printed after the report."""
    if chosen.first.pattern is None or chosen.first.pattern.id not in _UNEXPLAINED_DEATHS:
        return None
    causes = [
        i for i in roots if i is not chosen and i.first.category != "killed" and i.first.priority >= GENERIC_PRIORITY
    ]
    return min(causes, key=_order_key_of, default=None)


def _order_key_of(incident: Incident) -> tuple[Any, ...]:
    return order_key(incident.first)


# NCCL result codes that only say a CUDA or system call failed somewhere
UNSPECIFIC_NCCL = regex.compile(r"unhandled (?:cuda|system) error|internal error")
_EXPLAIN_LINES = 40  # the exception line ends a traceback of up to a few dozen lines
_LAST_ERROR_LINES = 4  # NCCL's "Last error:" detail printed just under the exception line


_KERNEL_ASSERT = regex.compile(r"Assertion `.+` failed")


def _kernel_assert(chosen: Incident, roots: list[Incident]) -> Incident | None:
    """ "CUDA error: device-side assert triggered" (or any CUDA error after it) is CUDA reporting, asynchronously,
    a kernel's failed assertion; the kernel's own line (`Loss.cu:245: ... Assertion `t >= 0 && t < n_classes`
    failed.`) from the same rank says what failed."""
    first = chosen.first
    # any CUDA error after a failed kernel assertion is the assertion surfacing (a cuBLAS call failing to execute
    # on a device already in the assert state, the watchdog's own device-side assert)
    if _KERNEL_ASSERT.search(first.text) or (
        first.category != "cuda_error" and "device-side assert triggered" not in first.text
    ):
        return None
    asserts = [
        i
        for i in roots
        if i is not chosen
        and i.first.category == first.category
        and _KERNEL_ASSERT.search(i.first.text)
        and (i.first.rank is None or first.rank is None or i.first.rank == first.rank)
    ]
    kernel = min(asserts, key=lambda i: (i.first.file, i.first.line), default=None)
    if kernel is not None and kernel.first.rank is None and first.rank is not None:
        # the kernel writes its assertion straight to stderr, without the rank prefix its process's errors carry
        kernel = Incident([replace(c, rank=first.rank) for c in kernel.candidates])
    return kernel


# transformers' lazy import re-raising a module's import failure with the original error on the lines under it
_REPORTS_ERROR_BELOW = frozenset({"transformers-lazy-import"})
_WRAPPED_ERROR_LINES = 3


# a process finding no GPU, and the failures of CUDA's start-up that explain it
_NO_GPU_SEEN = frozenset({"deepspeed-no-gpu-resources", "no-cuda-gpus"})
_DRIVER_FAILURES = frozenset({"cuda-driver-init-failed", "cuda-driver-too-old"})


def _explained_by(chosen: Incident, roots: list[Incident]) -> Incident | None:
    """A wrapper's line (transformers' "Failed to import X because of the following error") is explained by the
    error it prints under itself. NCCL's generic result codes ("unhandled cuda error", "internal error") only say
    a CUDA or system call failed; a line of the same writer just before the exception (or its "Last error:" detail
    just under it) that names the failure with another category (NCCL's `Cuda failure 'out of memory'`) is the
    cause. A process that found no GPU is explained by CUDA's failed start-up reported above it."""
    first = chosen.first
    if first.pattern is not None and first.pattern.id in _NO_GPU_SEEN:
        # "no GPU resources available": torch's warning above it that CUDA could not start says why
        driver = [
            i
            for i in roots
            if i.first.pattern is not None
            and i.first.pattern.id in _DRIVER_FAILURES
            and i.first.file == first.file
            and i.first.line < first.line
        ]
        return min(driver, key=lambda i: i.first.line, default=None)
    if first.pattern is not None and first.pattern.id in _REPORTS_ERROR_BELOW:
        # a wrapper that prints the error it caught on its next lines: a signature there names it
        below = [
            i
            for i in roots
            if i is not chosen
            and i.first.file == first.file
            and 0 < i.first.line - first.line <= _WRAPPED_ERROR_LINES
            and i.first.priority > first.priority
        ]
        return min(below, key=lambda i: i.first.line, default=None)
    if first.category != "nccl" or not UNSPECIFIC_NCCL.search(first.text):
        return None
    causes = [
        i
        for i in roots
        if i is not chosen
        and i.first.category not in ("nccl", first.category)
        and i.first.priority > first.priority
        # any copy of the error counts: error.json has no "Last error:" lines, the rank's own stderr.log does
        and any(
            i.first.file == c.file
            and (0 < c.line - i.first.line <= _EXPLAIN_LINES or 0 < i.first.line - c.line <= _LAST_ERROR_LINES)
            for c in chosen.candidates
        )
    ]
    return max(causes, key=lambda i: i.first.line, default=None)


def infer_rank_from_context(incident: Incident, candidates: list[Candidate]) -> list[int]:
    """An unprefixed pasted log: borrow the rank of a line that repeats the root's message, or else of the
    one rank whose own lines report the same failure (a kernel's device-side assert, then `[Rank 1] ...
    CUDA error: device-side assert triggered` from that rank's watchdog)."""
    message = incident.first.text.split(": ", 1)[-1].strip()
    if len(message) >= 12:
        found = sorted({c.rank for c in candidates if c.rank is not None and message in c.text})
        if found:
            return found
    pattern = incident.first.pattern
    if pattern is None or pattern.priority < GENERIC_PRIORITY:
        return []
    same = {c.rank for c in candidates if c.rank is not None and c.pattern is pattern}
    return sorted(same) if len(same) == 1 else []
