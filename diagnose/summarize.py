"""Turn the decided root incident (or the hang analysis) into the report's parts: the verdict, the
evidence lines, and the symptoms other ranks show.

Kept apart from api.py so the composition of stages stays readable and each wording rule lives in one
place.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import cast

import polars as pl
import regex

from diagnose.candidates import EVERY_PROCESS_FAILS, GENERIC_PRIORITY, Candidate, Incident
from diagnose.decide import (
    RAISING_STATEMENT,
    TEARDOWN_SIGNALS,
    UNSPECIFIC_NCCL,
    cut_tracebacks,
    exit_rows,
    infer_rank_from_context,
    signal_subcategory,
)
from diagnose.hang import WAIT_EVIDENCE, HangAnalysis, barrier_timed_out, blamed_by_monitored_barrier
from diagnose.model import Evidence, Location, Symptom, Verdict
from diagnose.patterns import Pattern
from diagnose.ranks import EXCEPTION_LINE, SRUN_TASK_REPORTS, SRUN_TASKS_LINE
from diagnose.rankset import format_ranks
from diagnose.refine import PHASE_CATEGORY
from diagnose.tracebacks import LAUNCHER_SIGNAL, SIGNAL_NAMES

MAX_EVIDENCE = 12
_ALARMING = ("critical", "error", "warning")
# a line's own log level, not a word inside its message (`run with NCCL_DEBUG=INFO for details` is an error's)
_QUIET_LEVEL = regex.compile(r"(?:^|[\s\[|])(?:INFO|DEBUG)(?:[\s\]:|]|$)|[Ww]arning|WARNING|^\s*[IW]\d{4} |^\[[IW] ")
_NAMED_WARN = 65  # a WARN signature at least this specific names the failure itself
_DETAIL_LINES = 4  # NCCL's "Last error:" block right around the exception line
_LAST_ERROR_LINES = 8  # error line, its ncclInvalidUsage-style gloss, "Last error:", the detail, blanks between
_NEAR_LINES = 20  # the WARN, its process's "-> N" return-code chain, then its traceback
# A peer's socket closed or its process exited: the peer is gone.
_PEER_GONE = frozenset({"gloo-peer-closed", "nccl-socket-peer-closed", "nccl-remote-error"})
# a line that only calls itself an error: quoted when nothing else is, never a category of its own
LAST_RESORT = "error-line"
# lines a library prints while it still retries; the error it gives up with, when the paste has it, says more
# warnings that yield to any other: a retry notice to the error after it, NCCL's `file.cc:N -> 2` return trace to
# the WARN that says what failed
_YIELDING_WARNINGS = frozenset({"nccl-connect-retrying", "nccl-error-return-trace"})


def _failed_exits(events: pl.DataFrame) -> list[dict[str, object]]:
    """Non-zero exits torchrun recorded, its own "Root Cause" first, then the earliest."""
    rows = [r for r in exit_rows(events) if r["exitcode"] or r["torchrun_root"]]
    return sorted(rows, key=lambda r: (not r["torchrun_root"], r["ts"] is None, r["ts"] or datetime.min, r["line"]))


def build_verdict(
    root: Incident | None,
    hang: HangAnalysis | None,
    candidates: list[Candidate],
    events: pl.DataFrame,
    left: set[int] = frozenset(),
    excerpt: bool = False,
    expected: set[int] = frozenset(),
) -> Verdict:
    """`excerpt`: the input is one pasted file or stdin, not a job's log files. `expected`: the job's ranks."""
    verdict = _decide_verdict(root, hang, candidates, events, left, excerpt, expected)
    if verdict.exception and (bare := _RICH_LOCATION.sub("", verdict.exception)) != verdict.exception:
        return replace(verdict, exception=bare)
    return verdict


def _decide_verdict(
    root: Incident | None,
    hang: HangAnalysis | None,
    candidates: list[Candidate],
    events: pl.DataFrame,
    left: set[int],
    excerpt: bool,
    expected: set[int],
) -> Verdict:
    if root is not None:
        first = root.first
        # the same runtime failure printed by several unlabelled processes and no clock to order them: the rank the
        # launcher saw fail is the answer, not whichever copy a detail line would attribute first
        copies = len(root.candidates) > 1 and first.ts is None and first.category not in EVERY_PROCESS_FAILS
        ranks = (
            root.ranks
            or (_sole_failed_rank(events) if copies else [])
            or infer_rank_from_context(root, candidates)
            or _traceback_owner_after(first, events)
            or _srun_task_after(root, events)
            or _srun_crashed_task(first, candidates, events)
            or _rank_of_detail(first, candidates)
            or _rank_of_raised(first, candidates)
        )
        # Ray folded the same line from many workers into one ("[repeated 12x across cluster]"): the ranks shown
        # are only the workers whose copy kept a rank, not the one that failed
        folded = _RAY_DEDUP.search(first.text.rstrip()) is not None
        if folded:
            ranks = []
        if not ranks and first.category not in EVERY_PROCESS_FAILS and not _compile_error(first):
            # The one rank the launcher saw fail is the writer of an error printed once, and the best
            # estimate for a runtime error several processes printed. A startup error every process hits
            # alike (a bad argument, a missing file or module) belongs to no one rank, even when only one
            # process's copy was kept: 20 of the 28 collectors' labels of such excerpts give none.
            ranks = _sole_failed_rank(events)
        rank = first.rank if first.rank is not None and not folded else (ranks[0] if ranks else None)
        shared = first.category == "config" or first.subcategory in _SHARED_STARTUP
        if shared and _named_by_spawn_section(first, candidates):
            # spawn names the worker that died first; a bad setting, an unreachable rendezvous stop every worker alike
            rank = None
        where = f" on rank {rank}" if rank is not None else _local_only(first)
        alike = every_rank_alike(root, expected)
        if alike:
            rank, where = None, f" on every rank ({format_ranks(root.ranks)})"
        host = first.host or next((c.host for c in root.candidates if c.host), None)
        title = _headline(first) + where
        if host:
            title += f" ({host})"
        location = Location(first.code_file, first.code_line) if first.code_file and first.code_line else None
        if first.rank_inferred:
            title += " (global rank inferred from node index and local rank)"
        confident = first.pattern is not None and first.pattern.priority >= 50 and (rank is not None or alike)
        confident = confident and not first.rank_inferred
        return Verdict(
            category=first.category,
            subcategory=(
                signal_subcategory(first.fields["signal"])
                if first.category == "killed" and first.fields.get("signal", "").startswith("SIG")
                else first.subcategory or _phase_subcategory(first.category, root.phase)
            ),
            title=title,
            rank=rank,
            ranks=tuple(ranks),
            host=host,
            exception=_root_line(first, candidates),
            location=location,
            time=first.ts.isoformat() if first.ts else None,
            confidence="high" if confident else "medium",
            pattern=first.pattern.id if first.pattern else None,
            explanation=first.pattern.explanation if first.pattern else "",
            rank_inferred=first.rank_inferred,
        )
    if hang is not None:
        suspect = hang.suspects[0] if len(hang.suspects) == 1 else None
        if suspect is not None and hang.subcategory == "early_exit":
            what = f"rank {suspect} had already exited without an error"
        elif suspect is not None and hang.subcategory == "desync":
            what = f"rank {suspect} waited in a different collective than the others"
        elif suspect is not None:
            what = f"rank {suspect} never arrived"
        elif hang.suspects:
            what = f"ranks {format_ranks(hang.suspects)}: {hang.reason}"
        else:
            what = hang.reason
        telling = hang.telling
        if hang.victims:
            noun = "rank" if len(hang.victims) == 1 else "ranks"
            title = f"Collective timeout on {noun} {format_ranks(hang.victims)}: {what}"
        else:
            title = (
                f"{telling.pattern.title if telling and telling.pattern else 'Ranks stopped making progress'}: {what}"
            )
        return Verdict(
            category="hang",
            subcategory=hang.subcategory,
            title=title,
            rank=suspect,
            ranks=hang.suspects,
            exception=telling.text if telling is not None else None,
            confidence="medium" if suspect is not None or telling is not None else "low",
            pattern=telling.pattern.id if telling and telling.pattern else None,
            explanation=(telling.pattern.explanation if telling and telling.pattern else "")
            or "Every failing rank only timed out waiting for a collective; no rank raised an error of its own.",
        )
    symptoms = [c for c in candidates if c.role == "symptom" and c.category != "killed"]
    failed = _failed_exits(events)
    quiet_failure = _quiet_failure(failed, candidates)
    if symptoms and quiet_failure is None:
        # The most telling symptom (a named desync or a peer that closed its socket beats generic teardown).
        first = min(symptoms, key=lambda c: (-c.priority, c.ts is None, c.ts or datetime.min, c.file, c.line))
        if len(left) == 1 and first.pattern is not None and first.pattern.id in _PEER_GONE:
            (rank,) = left
            return Verdict(
                category="hang",
                subcategory="early_exit",
                title=f"Rank {rank} left the job without an error while its peers still needed it",
                rank=rank,
                ranks=(rank,),
                exception=_root_line(first, candidates),
                confidence="medium",
                pattern=first.pattern.id if first.pattern else None,
                explanation="The peers lost their connection to a rank that printed no error, was not stopped by "
                "the launcher and no longer ran: it finished or returned early (fewer batches than the others, "
                "a rank-dependent early exit, a skipped collective), so the collective it left could never "
                "complete.",
            )
        # ProcessGroupNCCL's generic teardown notice ("failed or timed out") alone cannot tell a hang from an NCCL
        # error: the line that would say which is not in these logs
        unsure = first.category == "hang" and first.priority < WAIT_EVIDENCE
        return Verdict(
            category="unknown" if unsure else first.category,
            subcategory=None if unsure else first.subcategory,
            title=f"{first.pattern.title if first.pattern else first.text} (no rank logged a cause of its own)",
            rank=None,
            ranks=tuple(sorted({c.rank for c in symptoms if c.rank is not None and c.pattern == first.pattern})),
            host=first.host,
            exception=_root_line(first, candidates),
            confidence="low",
            pattern=first.pattern.id if first.pattern else None,
            explanation=(first.pattern.explanation if first.pattern else "")
            or "Only consequences of a failure were found; the failing rank's own log may be missing.",
        )
    stopped = _launcher_signalled(candidates)
    if stopped is not None and all(r["signal"] in TEARDOWN_SIGNALS for r in failed):
        signal = _signal_name(
            stopped.fields.get("received") or stopped.fields.get("signum") or stopped.fields.get("signal") or ""
        )
        return Verdict(
            category="killed",
            subcategory=signal_subcategory(signal) if signal.startswith("SIG") else None,
            title=f"The launcher itself received {signal or 'a signal'} and stopped every worker",
            host=stopped.host,
            exception=stopped.text.strip(),
            confidence="medium",
            pattern=cast(Pattern, stopped.pattern).id,
            explanation="No rank failed on its own: the launcher was told to stop from outside (scancel, a "
            "scheduler time limit or preemption, a node shutting down, or a user's kill) and passed the "
            "signal on to its workers.",
        )
    warned = [
        c
        for c in candidates
        if c.role == "context"
        and c.pattern
        and c.pattern.severity in _ALARMING
        # a catch-all signature (priority below the generic line) reads any line naming an error; one a library
        # logged at info or warning level is not the failure
        and (c.pattern.priority >= GENERIC_PRIORITY or not _QUIET_LEVEL.search(c.text))
    ]
    last_resort = [c for c in warned if cast(Pattern, c.pattern).id == LAST_RESORT]
    warned = [c for c in warned if cast(Pattern, c.pattern).id != LAST_RESORT]
    if warned:
        # Nothing raised and nothing timed out, but a library warned (NCCL_DEBUG output of a failed
        # bootstrap): far more likely the cause than a healthy run.
        first = _earliest([c for c in warned if cast(Pattern, c.pattern).id not in _YIELDING_WARNINGS] or warned)
        if _after_nccl_abort(first, candidates):
            # NCCL had already aborted this process's communicators ("- Abort COMPLETE"): its warnings are the
            # teardown of a failure these logs do not show
            return Verdict(
                category="unknown",
                title="NCCL communicators were aborted; the failure that caused it is not in these logs",
                confidence="low",
                explanation="Something made this process abort its NCCL communicators (an error on another rank, "
                "a timeout, a shutdown); the socket and proxy warnings after that are the abort's consequences.",
            )
        pattern = cast(Pattern, first.pattern)
        owner = _traceback_owner_after(first, events)
        warned_ranks = tuple(sorted({c.rank for c in warned if c.rank is not None and c.pattern == pattern}))
        rank = first.rank if first.rank is not None else (owner[0] if owner else _sole_exit(failed))
        if _RAY_DEDUP.search(first.text.rstrip()):
            rank = None  # Ray folded the same warning from many workers into this one line: no one rank's
        return Verdict(
            category=first.category,
            subcategory=first.subcategory,
            title=f"{pattern.title} (the only warning-level line in the logs)",
            rank=rank,
            ranks=warned_ranks,
            host=first.host,
            exception=first.text,
            confidence="low",
            pattern=pattern.id,
            explanation=pattern.explanation,
        )
    if failed:
        first = failed[0]
        rank = None if _listed_as_other_failure(first) else first["grank"]  # the root cause entry was cut off
        where = f"rank {rank}" if rank is not None else "a rank"
        how = f"exited with code {first['exitcode']}" if first["exitcode"] else "failed first (torchrun's root cause)"
        return Verdict(
            category="unknown",
            title=f"{where} {how} but its error is not in these logs",
            rank=rank,
            ranks=tuple(sorted({r["grank"] for r in failed if r["grank"] is not None})),
            host=first["host"],
            exception=_earliest(last_resort).text if last_resort else None,
            confidence="low",
            explanation="torchrun saw the rank fail, but the rank's own output (its stderr.log under --log-dir, or "
            "the job's .err file) is not among the inputs.",
        )
    cut = cut_tracebacks(events)
    if cut.height:
        # A traceback began but its exception line is not in the logs (a paste cut short): a failure, not "ok".
        row = cut.sort("line").row(0, named=True)
        where = f"rank {row['grank']}" if row["grank"] is not None else "a process"
        fields = json.loads(row["fields"] or "{}")
        phase = fields.get("phase") or None
        # the statement that raised, when the frames end on one (`assert len(set(dtypes)) == 1`), is the failure
        raising = fields.get("source") if RAISING_STATEMENT.match(fields.get("source") or "") else None
        return Verdict(
            # the frames show what it was doing; a failed assert or a raise of the code's own is its bug otherwise
            category=PHASE_CATEGORY.get(phase or "", "code" if raising else "unknown"),
            title=f"{where} raised an exception whose last line is not in these logs",
            rank=row["grank"],
            ranks=tuple(sorted({r for r in cut.get_column("grank").to_list() if r is not None})),
            host=row["host"],
            exception=raising,
            location=Location(row["code_file"], row["code_line"]) if row["code_file"] and row["code_line"] else None,
            confidence="low",
            explanation="A Python traceback started but was cut before its exception line; the frames show where.",
        )
    teardown = [c for c in candidates if c.category == "killed"]
    interrupted = [c for c in teardown if c.subcategory == "sigint" and c.role == "symptom"]
    if interrupted:
        # every process stopped at a KeyboardInterrupt: Ctrl-C or a SIGINT from outside, not a fault of theirs
        first = min(interrupted, key=lambda c: (c.file, c.line))
        return Verdict(
            category="killed",
            subcategory="sigint",
            title="The processes were interrupted (SIGINT / Ctrl-C); none failed on its own",
            ranks=tuple(sorted({c.rank for c in interrupted if c.rank is not None})),
            exception=first.text.strip(),
            confidence="medium",
            pattern=cast(Pattern, first.pattern).id,
            explanation=cast(Pattern, first.pattern).explanation,
        )
    if last_resort:
        # a line that says "error" and nothing known: quote it rather than report nothing
        first = _earliest(last_resort)
        owner = _traceback_owner_after(first, events)
        return Verdict(
            category="unknown",
            title="An error no signature knows (the only error line in the logs)",
            rank=first.rank if first.rank is not None else (owner[0] if owner else None),
            host=first.host,
            exception=first.text,
            confidence="low",
            pattern=LAST_RESORT,
            explanation=cast(Pattern, first.pattern).explanation,
        )
    blamed = blamed_by_monitored_barrier(candidates)
    if blamed is not None:
        rank, report = blamed
        late = barrier_timed_out(candidates)  # a wait that ran out names a late rank, a broken one a failed rank
        return Verdict(
            category="hang" if late else "unknown",
            subcategory="straggler" if late else None,
            title=f"rank {rank} did not reach the monitored barrier in time (another rank's monitoredBarrier names it)"
            if late
            else f"rank {rank} failed first (another rank's monitoredBarrier names it) but its error is not in these logs",
            rank=rank,
            ranks=(rank,),
            exception=None if late else report.text.strip(),
            confidence="low",
            pattern=cast(Pattern, report.pattern).id,
            explanation=cast(Pattern, report.pattern).explanation,
        )
    if teardown:
        return Verdict(category="unknown", title="Ranks were stopped but no cause was logged", confidence="low")
    if _nccl_init_unfinished(candidates):
        return Verdict(
            category="hang",
            subcategory="nccl_init",
            title="NCCL began setting up a communicator and the logs end before any finished (Init COMPLETE)",
            confidence="low",
            explanation="Nothing failed, but the last thing NCCL_DEBUG=INFO shows is communicator set-up (bootstrap, "
            "peer-to-peer checks) with no 'Init COMPLETE': the ranks are stuck connecting to each other, or one rank "
            "never joined. P2P between the GPUs (NCCL_P2P_DISABLE=1 to test), the network interface "
            "(NCCL_SOCKET_IFNAME) and a rank that never started are the usual causes.",
        )
    if excerpt:
        # A pasted excerpt is shown because something went wrong; finding nothing means the error is not in it.
        return Verdict(
            category="unknown",
            title="No failure signature in this excerpt (it may end before the error, or the error is new to the library)",
            confidence="low",
            explanation="Nothing in the excerpt matched a known failure, a traceback or a launcher's failure report. "
            "Include the lines of the first rank that failed (its stderr) or the whole log.",
        )
    return Verdict(category="ok", title="No failure found in the logs", confidence="medium" if events.height else "low")


def _earliest(candidates: list[Candidate]) -> Candidate:
    return min(candidates, key=lambda c: (c.ts is None, c.ts or datetime.min, c.file, c.line))


def _quiet_failure(failed: list[dict[str, object]], candidates: list[Candidate]) -> dict[str, object] | None:
    """The launcher's first failure, when that rank exited with an error code of its own and printed nothing
    here: the others' peer-closed lines only repeat that it died, so the report names it instead."""
    if not failed:
        return None
    first = failed[0]
    code, rank = first["exitcode"], first["grank"]
    if not isinstance(code, int) or code <= 0 or rank is None:
        return None
    own = [
        c
        for c in candidates
        if c.rank == rank and c.role != "context" and c.pattern is not None and c.subcategory != "teardown"
    ]
    return None if own else first


_FORWARDED_SIGNALS = {"SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2"}


def _launcher_signalled(candidates: list[Candidate]) -> Candidate | None:
    """torchrun's agent (or DeepSpeed's launcher) saying a signal reached IT (not a worker): the job was stopped
    from outside. Its own teardown after a worker failed sends SIGTERM; passing on any other signal (SIGHUP when
    the terminal closed, SIGINT) means the agent received that signal itself."""
    received = [
        c
        for c in candidates
        if (
            c.pattern is not None
            and c.pattern.id == "torchrun-sigterm-teardown"
            and (c.fields.get("received") or c.fields.get("signum") or c.fields.get("signal") in _FORWARDED_SIGNALS)
        )
        or (c.from_traceback and c.phase == LAUNCHER_SIGNAL)  # DeepSpeed's launcher in its signal handler
    ]
    # the agent's own traceback ending in SignalException, else its "Received N death signal" line, else the
    # exception's line pasted without its frames (or quoted in an error-file dump)
    return min(
        received,
        key=lambda c: (
            not (c.from_traceback and "SignalException" in c.text),
            "death signal" not in c.text,
            _SIGNAL_EXCEPTION.match(c.text) is None,
            c.file,
            c.line,
        ),
        default=None,
    )


_SIGNAL_EXCEPTION = regex.compile(r"\s*(?:[\w.]+\.)?SignalException: ")


def _signal_name(value: str) -> str:
    value = value.removeprefix("Signals.")
    return SIGNAL_NAMES.get(int(value), f"signal {value}") if value.isdigit() else value


def _local_only(candidate: Candidate) -> str:
    """When only a node and a local rank are known, say exactly that instead of guessing a global rank."""
    row = candidate.rows[0] if candidate.rows else {}
    local, node = row.get("local_rank"), row.get("host")
    if node is None and row.get("run_dir") is not None:  # a torchrun run dir is one node: named as the report shows it
        node = str(row.get("file") or row["run_dir"]).rsplit("/attempt_", 1)[0]
    if local is None or node is None:
        return ""
    return f" on local rank {local} of {node} (global rank not in the logs)"


def _lines_below(first: Candidate, events: pl.DataFrame) -> pl.DataFrame:
    """The events printed in the same file within _NEAR_LINES under a candidate: where its own process's next
    words (its traceback, srun's report of its end) come."""
    return events.filter(
        (pl.col("file") == first.file) & pl.col("line").is_between(first.line + 1, first.line + _NEAR_LINES)
    )


def _traceback_owner_after(first: Candidate, events: pl.DataFrame) -> list[int]:
    """NCCL's WARN lines (NCCL failures, and its own CUDA out-of-memory) carry host, pid and device but no
    rank, and a kernel's assertion carries none; the traceback the same process prints right after them
    (`[rank9]: Traceback ...`, often cut off in a paste) does."""
    # a kernel's `Assertion ... failed` printf comes from the process whose traceback follows, unprefixed too
    kernel_assert = first.pattern is not None and first.pattern.id == "device-side-assert"
    if first.from_traceback or ("WARN" not in first.text and not kernel_assert):
        return []
    near = _lines_below(first, events)
    # a launcher's section header (`-- Process 3 terminated with the following error:`) means the traceback
    # below it is the launcher quoting a worker, which need not be the process that printed the WARN
    sections = near.filter((pl.col("kind") == "pattern") & pl.col("fields").str.contains('"section_rank"'))
    before = sections.get_column("line").min() if sections.height else None
    after = near.filter(pl.col("kind") == "traceback")
    if before is not None:
        after = after.filter(pl.col("line") < before)
    owners = set(after.get_column("grank").drop_nulls().to_list())
    if len(owners) != 1:
        return []
    # With NCCL lines of other processes between the WARN and the traceback, the traceback may be any of
    # theirs: it is the WARN's own only if its rank sits on the WARN's GPU (one process per GPU, in order).
    row = first.rows[0] if first.rows else {}
    between = near.filter(pl.col("line") < after.get_column("line").min()).get_column("pid").drop_nulls()
    if row.get("pid") is not None and any(p != row["pid"] for p in between.to_list()):
        return sorted(owners) if owners == {row.get("device")} else []
    return sorted(owners)


_COMPILE_ERRORS = regex.compile(r"\s*(?:SyntaxError|IndentationError|TabError): ")


def _compile_error(first: Candidate) -> bool:
    """Python refusing to compile a module stops every process that imports it, before any rank exists: the one
    local rank a launcher names only died first."""
    return _COMPILE_ERRORS.match(first.text) is not None


# failures to reach what every process needs at start (the rendezvous store): each task meets them alike
_SHARED_STARTUP = frozenset({"rendezvous", "store"})


_SRUN_OWN_EXIT = SRUN_TASKS_LINE + r"Exited with exit code [1-9]"
_SRUN_CRASHED = "srun-task-crashed"


def _srun_task_after(root: Incident, events: pl.DataFrame) -> list[int]:
    """Without `srun --label` no line of a traceback names its task, but srun reports a task's end as soon
    as its process exits, which is right after the traceback it printed last: the first of srun's end lines
    under the exception names the writer of an error printed once (srun's task lines carry a rank only when
    srun starts the trainer itself: ranks.py). An error every task printed or met alike (a start-up error, an
    unreachable rendezvous) stays rankless: srun's first report then only says which task gave up first."""
    first = root.first
    if "srun_task" not in events.columns or not (first.from_traceback or regex.match(EXCEPTION_LINE, first.text)):
        return []
    if len({(c.file, c.line) for c in root.candidates}) > 1:
        return []
    if first.category in EVERY_PROCESS_FAILS or first.subcategory in _SHARED_STARTUP:
        return []
    # several tasks exiting with an error code of their own (not srun ending the rest) while this is the only
    # exception printed: the others failed alike without a word, so the first srun names no one writer
    own_exits = events.filter((pl.col("file") == first.file) & pl.col("text").str.contains(_SRUN_OWN_EXIT))
    others = events.filter(
        ((pl.col("kind") == "traceback") | pl.col("text").str.contains(EXCEPTION_LINE))
        & ~pl.col("line").is_in([c.line for c in root.candidates])
    )
    if own_exits.get_column("line").n_unique() > 1 and others.is_empty():
        return []
    near = _lines_below(first, events)
    ends = near.filter(pl.col("srun_task").is_not_null())
    if ends.is_empty():
        return []
    end = ends.sort("line").row(0, named=True)
    if near.filter((pl.col("kind") == "traceback") & (pl.col("line") < end["line"])).height:
        return []
    return [end["srun_task"]]


def _srun_crashed_task(first: Candidate, candidates: list[Candidate], events: pl.DataFrame) -> list[int]:
    """A crash dump with no rank (`Fatal Python error: Segmentation fault`) and plain srun reporting exactly one
    task dead of that signal (`srun: error: vm: task 3: Segmentation fault`): that task wrote it, and srun's
    task is the rank when srun starts the trainer itself (ranks.py fills `srun_task` only then)."""
    if first.category != "killed" or first.subcategory != "segfault" or "srun_task" not in events.columns:
        return []
    crashes = {
        (c.file, c.line) for c in candidates if c.pattern is not None and c.pattern.id == _SRUN_CRASHED and c != first
    }
    rows = events.filter(pl.col("srun_task").is_not_null())
    tasks = {row["srun_task"] for row in rows.iter_rows(named=True) if (row["file"], row["line"]) in crashes}
    return sorted(tasks) if len(tasks) == 1 else []


def _rank_of_detail(first: Candidate, candidates: list[Candidate]) -> list[int]:
    """The detail printed with an exception ("Last error: Duplicate GPU detected : rank 9 and rank 1 ...")
    may name the rank that the exception line itself does not."""
    near = {
        c.rank
        for c in candidates
        if c.rank is not None
        and c.file == first.file
        and abs(c.line - first.line) <= _DETAIL_LINES
        and c.pattern is not None
        and (
            (c.role == "root" and c.pattern.priority >= first.priority)
            or (c.role == "context" and "rank" in c.fields)  # a runtime's header naming the rank (torch_npu)
            or c.pattern.id in SRUN_TASK_REPORTS  # srun: `task 0: Out Of Memory`
        )
    }
    return sorted(near) if len(near) == 1 else []


def _rank_of_raised(first: Candidate, candidates: list[Candidate]) -> list[int]:
    raised = _raised_above(first, candidates)
    return [raised.rank] if raised is not None and raised.rank is not None else []


_SPAWN_SECTION = "mp-spawn-process-failed"


def _named_by_spawn_section(first: Candidate, candidates: list[Candidate]) -> bool:
    """The rank came from torch.multiprocessing.spawn's `-- Process N terminated with the following error:` header
    above the traceback (the nearest such header in the file names the same process), not from the line itself."""
    headers = [
        c
        for c in candidates
        if c.pattern is not None and c.pattern.id == _SPAWN_SECTION and c.file == first.file and c.line < first.line
    ]
    if not headers:
        return False
    nearest = max(headers, key=lambda c: c.line)
    return nearest.fields.get("section_rank") == str(first.rank)


_NCCL_ABORTED = "- Abort COMPLETE"
_NCCL_SETUP = frozenset({"nccl-p2p-device-bus", "nccl-comm-init-rank"})


def _nccl_init_unfinished(candidates: list[Candidate]) -> bool:
    """NCCL_DEBUG=INFO set-up lines and not one communicator reporting "Init COMPLETE"."""
    setup = [c for c in candidates if c.pattern is not None and c.pattern.id in _NCCL_SETUP]
    return bool(setup) and not any("Init COMPLETE" in c.text or _NCCL_ABORTED in c.text for c in setup)


def _after_nccl_abort(warning: Candidate, candidates: list[Candidate]) -> bool:
    """An NCCL communicator of the same file reported its abort done above this warning."""
    return any(
        c.file == warning.file and c.line < warning.line and c.text.rstrip().endswith(_NCCL_ABORTED) for c in candidates
    )


def _listed_as_other_failure(row: dict[str, object]) -> bool:
    """torchrun listed this exit under "Failures:", apart from its root cause: another rank failed first."""
    return bool(row["fields"]) and '"other_failure"' in cast(str, row["fields"])


def _sole_exit(failed: list[dict[str, object]]) -> int | None:
    """The rank of the one process the launcher saw fail, if it saw exactly one (an entry listed among the other
    failures means it saw more, even where the root cause's entry was cut off)."""
    ranks = {cast(int, r["grank"]) for r in failed if r["grank"] is not None}
    return ranks.pop() if len(ranks) == 1 and not any(map(_listed_as_other_failure, failed)) else None


def _sole_failed_rank(events: pl.DataFrame) -> list[int]:
    """An unattributed error and exactly one rank the launcher saw fail on its own: that rank."""
    rows = [
        r
        for r in exit_rows(events)
        if r["grank"] is not None and r["exitcode"] and (r["exitcode"] > 0 or r["signal"] not in (None, "SIGTERM"))
    ]
    failed = {r["grank"] for r in rows}
    return sorted(failed) if len(failed) == 1 and not any(map(_listed_as_other_failure, rows)) else []


_RAISED_NCCL_ERROR = regex.compile(r"NCCL [Ee]rror")


def _raised_above(first: Candidate, candidates: list[Candidate]) -> Candidate | None:
    """An NCCL failure seen as a log line may be the detail ("Last error:", a WARN) of an NCCL error raised
    just above it: that raised error is what to quote, and its writer's rank is the failure's."""
    if first.from_traceback or first.category != "nccl":
        return None
    raised = [
        c
        for c in candidates
        if c.pattern is not None
        and c.pattern.id == "nccl-error"
        and c.file == first.file
        and 0 < first.line - c.line <= _LAST_ERROR_LINES
        and _RAISED_NCCL_ERROR.search(c.text) is not None  # the raised error, not its `ncclInvalidUsage: ...` gloss
        and not _garbled(c.text)  # two processes' exception lines written into each other: quote the detail
    ]
    return min(raised, key=lambda c: c.line) if raised else None


# rich's logging handler right-aligns the caller's `file.py:line` after the message (`... workers    api.py:729`)
_RICH_LOCATION = regex.compile(r"\s{2,}[\w.-]+\.py:\d+\s*$")


def _root_line(first: Candidate, candidates: list[Candidate]) -> str | None:
    """The line to quote as the root cause.

    A raised exception is quoted as raised. But an NCCL failure seen only as a log line (no traceback)
    is best named by NCCL's own first WARN from the same file, which says what failed (a shared-memory
    segment, a socket, an IB completion), when that WARN came before it, or at any point when the failure
    itself only says "unhandled cuda/system error" (the WARN is the detail NCCL's code refers to).
    """
    if (raised := _raised_above(first, candidates)) is not None:
        return raised.text
    first = _cleanest(first, candidates)
    if first.pattern is None and first.category == "killed":
        # a signal death known from an exit record: quote the launcher's line that reports it, if one was printed
        code = str(first.rows[0]["exitcode"]) if first.rows else None
        # the agent's `failed (exitcode: -11)` line, else the summary's `Signal 11 (SIGSEGV) received by PID`
        reports = [
            c
            for c in candidates
            if c.pattern is not None
            and c.rank == first.rank
            and code is not None
            and (c.fields.get("exitcode") == code or "-" + c.fields.get("signum", "") == code)
        ]
        return min(reports, key=lambda c: (c.file, c.line)).text if reports else None
    # NCCL's own WARN that names a failure (a specific signature) is quoted as it is
    own_warn = "NCCL WARN" in first.text and first.pattern is not None and first.pattern.priority >= _NAMED_WARN
    if not first.from_traceback and first.category == "nccl" and not own_warn:
        unspecific = UNSPECIFIC_NCCL.search(first.text) is not None
        warns = [
            c
            for c in candidates
            if c.role == "context"
            and c.category == "nccl"
            and c.pattern is not None
            and c.pattern.severity == "warning"
            and c.file == first.file
            and (c.line < first.line or unspecific)
        ]
        if warns:
            return min(warns, key=lambda c: c.line).text
    if not (first.from_traceback or first.pattern):
        return None
    quoted = _unglued(first.text, candidates, first.pattern)
    if _TYPE_ALONE.fullmatch(quoted) and (detail := _message_below(first, candidates)) is not None:
        return detail
    return quoted


# an exception printed with an empty first line, its message on the lines below it (CuPy's `ImportError:` then a
# banner and `Original error:`, litdata's `RuntimeError:` then the worker's own traceback): the first exception
# line in that message is what failed
_TYPE_ALONE = regex.compile(r"\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception):\s*")
_EXCEPTION_WITH_MESSAGE = regex.compile(r"\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): \S")
_MESSAGE_BODY = 30  # lines


def _message_below(first: Candidate, candidates: list[Candidate]) -> str | None:
    below = [
        c
        for c in candidates
        if c.file == first.file
        and first.line < c.line <= first.line + _MESSAGE_BODY
        and _EXCEPTION_WITH_MESSAGE.match(c.text)
    ]
    return min(below, key=lambda c: c.line).text.strip() if below else None


# an exception line two processes wrote into each other: `torch.distributedtorch.distributed.DistBackendError.: ...`
_INTERLEAVED_TYPE = regex.compile(r"\s*[\w.]*(?:Error|Exception)\.:")


def _garbled(text: str) -> bool:
    return _INTERLEAVED_TYPE.match(text) is not None


# Exception lines of several processes written into each other mid-word: a type glued to the next writer's text
# (`OutOfMemoryErrortorch.cuda: .`, `OutOfMemoryErrorCUDA out of memory`), or a line left with only `: ` of its type
_SAME_MESSAGE_CHARS = 30
_DIGITS = regex.compile(r"\d+")
_GLUED_TYPE = regex.compile(r"\w(?:Error|Exception)(?:[a-z]|[A-Z](?!roup\b)|: \.)|^\s*: ")


def _cleanest(first: Candidate, candidates: list[Candidate]) -> Candidate:
    """The same failure printed whole by another process in the same file, when this one's line is glued: a line
    of the same signature whose message (its first words) the glued line also holds."""
    if first.pattern is None or not _GLUED_TYPE.search(first.text):
        return first
    glued = _DIGITS.sub("N", first.text)
    whole = [
        c
        for c in candidates
        if c.pattern == first.pattern
        and c.file == first.file
        and not _GLUED_TYPE.search(c.text)
        and _DIGITS.sub("N", c.text.strip())[:_SAME_MESSAGE_CHARS] in glued
    ]
    return min(whole, key=lambda c: c.line) if whole else first


# Processes writing one pipe without line buffering glue the next writer's exception type onto the end of a
# message (`... in dataset_info.json.ValueError`); when the same message was also printed whole, quote that.
_GLUED_EXCEPTION_TYPE = regex.compile(r"(?<=[.!?)'\"])[A-Z]\w*(?:Error|Exception)$")


# A tqdm progress bar the message was written right after, on the same line (`... 0/104 [00:00<?, ?it/s]<message>`)
_PROGRESS_BAR = regex.compile(r"^.*?\d+%\|[^|]*\|\s*[\d.]+/[\d.?]+\s*\[[^\]]*\]\s*(?=\S)")


# Ray folds identical lines from many workers into one and says so at its end
_RAY_DEDUP = regex.compile(r" \[repeated \d+x across cluster\]$")


# A whole terminal session pasted as one line: the traceback's frames, then the exception, then the next prompt.
_FLAT_FRAMES = regex.compile(r'Traceback \(most recent call last\):.*File "[^"]+", line \d+')
_EXCEPTION_START = regex.compile(r"[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure):")
_SHELL_PROMPT = regex.compile(r"\s+(?:\(\S+\)\s+)?[\w.-]+@[\w.-]+:\S*[$#]\s*$")


# `\n` as two characters, as JSON writes a newline, followed by what starts a line or by the end of the JSON
# string (`...failure\n", "pipe": "stderr"}`) or a module's exception (`\nray.exceptions.RaySystemError:`), not
# `C:\models\new_model`
_ESCAPED_NEWLINE = regex.compile(r"(?<!\\)\\n(?=\s|\\n|[A-Z]|\"|(?:[a-z_]\w*\.)+\w*(?:Error|Exception):)")


def _unflattened(text: str) -> str:
    frames = _FLAT_FRAMES.search(text)
    start = _EXCEPTION_START.search(text, frames.end()) if frames else None
    return _SHELL_PROMPT.sub("", text[start.start() :]) if start else text


# the first cells of a text table row (Triton's model status table: `| tensorrt_llm | 1 | UNAVAILABLE: ...`)
_TABLE_CELLS = regex.compile(r"\|(?: [^|]{1,60}? +\|){1,4} +(?=\S)")


_REPR_OPENING = regex.compile(r"\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\(['\"]")


def _unglued(text: str, candidates: list[Candidate], pattern: Pattern | None = None) -> str:
    # a message read from a JSON record (torchrun's error.json logged whole) keeps its newlines escaped: its first
    # line is what the interpreter would have printed as the exception line, unless the signature names a later one
    # (a server logging a remote error as one quoted string: `"... failed:\nray.exceptions.RaySystemError: ..."`)
    text = _unflattened(_RAY_DEDUP.sub("", text.rstrip()))
    # (an exception's repr, `MisconfigurationException('... [0, 1]\n But ...`, is one printed line: kept whole)
    pieces = [text] if _REPR_OPENING.match(text) else _ESCAPED_NEWLINE.split(text)
    text = pieces[0]
    if pattern is not None and len(pieces) > 1 and pattern.compiled.search(text) is None:
        named = next((piece for piece in pieces[1:] if pattern.compiled.search(piece)), text)
        text = named.removesuffix('"') if named.count('"') % 2 else named
    if "\r" in text:  # a progress bar redrawn with carriage returns: the terminal shows what came after the last
        text = next((piece for piece in reversed(text.split("\r")) if piece.strip()), text)
    text = _PROGRESS_BAR.sub("", text)
    if (cells := _TABLE_CELLS.match(text)) is not None:  # the status cell holds the message
        text = text[cells.end() :].rstrip(" |")
    if text.endswith("`") and text.count("`") % 2:  # the closing mark of a Markdown code span the paste kept
        text = text[:-1].rstrip()
    if text.endswith('"') and text.count('"') % 2:  # the closing quote of a log a poster quoted, opened lines above
        text = text[:-1].rstrip()
    elif text.startswith('"') and text.endswith('"') and _EXCEPTION_WITH_MESSAGE.match(text[1:-1]):
        text = text[1:-1]  # ...or a line the poster put in quotes of its own
    whole = _GLUED_EXCEPTION_TYPE.sub("", text)
    return whole if whole != text and any(c.text.strip() == whole.strip() for c in candidates) else text


def _headline(candidate: Candidate) -> str:
    if candidate.pattern is not None:
        return candidate.pattern.title
    if candidate.category == "killed":  # a signal death from an exit record: "exitcode -9 (SIGKILL)"
        code, _, signal = candidate.text.removeprefix("exitcode ").partition(" ")
        return f"Killed by {signal.strip('()')} (exit code {code})"
    return candidate.text.split(":", 1)[0]


_PHASES = {"oom": ("forward", "backward", "optimizer"), "nccl": ("init",)}


def _phase_subcategory(category: str, phase: str | None) -> str | None:
    """Where in the step it failed, when the signature itself does not say (OOM in backward, NCCL at init)."""
    return phase if phase in _PHASES.get(category, ()) else None


def related_incidents(root: Incident, incidents: list[Incident]) -> list[Incident]:
    """Other root-role lines the same rank printed at the same moment (NCCL's "Last error: ..."),
    which often name the precise cause behind a generic exception."""
    first = root.first
    out = []
    for other in incidents:
        o = other.first
        if other is root or o.role != "root" or o.rank != first.rank or o.pattern is None:
            continue
        close = o.ts is not None and first.ts is not None and abs((o.ts - first.ts).total_seconds()) <= 1.0
        if close or (o.file == first.file and abs(o.line - first.line) <= 10):
            out.append(other)
    return out


def build_evidence(root: Incident | None, hang: HangAnalysis | None, candidates: list[Candidate]) -> list[Evidence]:
    if root is not None:
        chosen = sorted(root.candidates, key=lambda c: (c.rank is None, c.rank or 0, c.file, c.line))
    elif hang is not None:
        chosen = sorted((c for c in candidates if c.role == "symptom"), key=lambda c: (c.rank is None, c.rank or 0))
    else:
        chosen = []
    seen: set[tuple[str, int]] = set()
    out = []
    for c in chosen:
        if (c.file, c.line) in seen:
            continue
        seen.add((c.file, c.line))
        out.append(Evidence(c.file, c.line, c.rank, c.text))
        if len(out) >= MAX_EVIDENCE:
            break
    return out


def build_symptoms(candidates: list[Candidate], root: Incident | None) -> list[Symptom]:
    root_ids = {id(c) for c in root.candidates} if root else set()
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        if id(c) in root_ids or c.role == "context":
            continue
        if c.role == "root" and root is not None:
            kind = c.pattern.id if c.pattern else c.category
        elif c.role == "symptom":
            kind = c.pattern.id if c.pattern else f"{c.category}-{c.subcategory}"
        else:
            continue
        groups.setdefault(kind, []).append(c)
    out = []
    for kind, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ranks = tuple(sorted({c.rank for c in group if c.rank is not None}))
        out.append(Symptom(kind, ranks, len(group), group[0].text))
    return out


_SAME_MOMENT_S = 1.0  # the clock's resolution in most logs: errors this close are simultaneous


def every_rank_alike(root: Incident, expected: set[int]) -> bool:
    """Every rank of the job raised the same error at the same moment (a start-up error, a bad checkpoint every
    rank loads, an op every rank runs): no one rank is the root cause, so the verdict names the set, not a rank.
    (Deaths by a signal are not errors the ranks raised: the launcher's first observed failure stays the rank.)"""
    ranks = set(root.ranks)
    if root.first.category == "killed" or len(ranks) < 2 or not expected or not expected <= ranks:
        return False
    times = [c.ts for c in root.candidates if c.ts is not None and c.rank is not None]
    return not times or (max(times) - min(times)).total_seconds() <= _SAME_MOMENT_S
