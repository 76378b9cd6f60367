"""Name suspects when every failing rank only timed out: who never arrived, who went quiet.

From text alone (shared/reference/message-formats.md, "Hang analysis"): a rank whose last enqueued
work equals its last completed work never entered the stuck collective; ranks timing out on different
SeqNum/OpType/sizes took different code paths (a desync); a rank that printed no timeout but was
SIGTERMed by torchrun was still stuck when the others gave up; expected ranks with no line at all
went silent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from diagnose.candidates import WATCHDOG_ABORT, Candidate
from diagnose.patterns import group_value

_TIMEOUT_PATTERNS = {"nccl-watchdog-timeout", "gloo-timeout"}  # the ones carrying SeqNum / op / sizes
_STATUS_PATTERN = "nccl-watchdog-work-status"
WAIT_EVIDENCE = 30
_LOWER_SEQ = "timed out on an earlier collective (lower SeqNum) than the others"
_OVERFULL = (
    "the store barrier counted as many workers as the world size or more and still timed out: no rank is missing; "
    "keys an earlier (restarted) attempt left in the store threw the count off"
)


@dataclass(frozen=True)
class HangAnalysis:
    subcategory: str | None
    suspects: tuple[int, ...]
    victims: tuple[int, ...]
    silent: tuple[int, ...]
    reason: str
    table: tuple[dict[str, object], ...]
    telling: Candidate | None = None  # a line that names the problem itself (a desync, a barrier's missing ranks)


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def _whole_world(expected: set[int]) -> bool:
    """Ranks 0..max seen in an excerpt are the whole job only if that count is a world size jobs use (a
    power of two or whole 8-GPU nodes); seeing ranks up to 2 says the excerpt left out rank 3 and more, so
    the missing rank 0 is not singled out."""
    n = len(expected)
    return n > 0 and (n & (n - 1) == 0 or n % 8 == 0)


def _odd_call_site(timeouts: list[Candidate]) -> set[int]:
    """Without the NCCL watchdog's SeqNum and op (gloo prints neither), the tracebacks of the timed-out waits say
    where each rank waited: when several ranks share one place in the code and a single rank waited somewhere
    else (a collective only it called, a step it skipped), that rank took another code path."""
    sites: dict[int, set[tuple[str, int]]] = {}
    for c in timeouts:
        if c.from_traceback and c.rank is not None and c.code_file and c.code_line is not None:
            sites.setdefault(c.rank, set()).add((c.code_file, c.code_line))
    by_site: dict[tuple[str, int], set[int]] = {}
    for rank, where in sites.items():
        if len(where) == 1:
            by_site.setdefault(next(iter(where)), set()).add(rank)
    return _lone_rank(list(by_site.values()))


_PEER_CLOSED = frozenset({"gloo-peer-closed", "nccl-socket-peer-closed"})


def _peer_closed(candidates: list[Candidate]) -> set[int]:
    return {c.rank for c in candidates if c.pattern is not None and c.pattern.id in _PEER_CLOSED and c.rank is not None}


def _lone_rank(groups: list[set[int]]) -> set[int]:
    """Ranks split between exactly two places to wait: one rank alone against two or more together is the one that
    went another way."""
    if len(groups) != 2:
        return set()
    alone, crowd = sorted(groups, key=len)
    return alone if len(alone) == 1 and len(crowd) >= 2 else set()


def ranks_that_left(
    candidates: list[Candidate], seen: set[int], launcher_failed: set[int] | None, world: int = 0
) -> set[int]:
    """Ranks seen printing ordinary lines, yet with no timeout, no error and no SIGTERM from the launcher,
    in a job whose launcher reported its failures: they were gone before the others gave up (ran out of
    data, returned early, skipped the collective). Without a launcher report nothing can be said. `world`,
    a world size a process stated, adds the ranks it includes that printed nothing and no launcher reported."""
    if not launcher_failed:
        return set()
    active = {c.rank for c in candidates if c.rank is not None}
    return (seen - active - launcher_failed) | (set(range(world)) - seen - launcher_failed)


def _group_members(timeouts: list[Candidate], victims: set[int], waited: Sequence[Candidate] = ()) -> set[int]:
    """The ranks 0..N-1 of a collective whose sizes show N: an all-gather's output is its input times the group
    size, a reduce-scatter's input its output times it. Only when the ranks that timed out fit in 0..N-1 (the
    default group, or a group of the first N ranks); a group of other ranks cannot be told from its size. A wait
    line that lists the collective's members (XLA's `global_devices=[0,1]`) names them outright."""
    listed = {int(r) for c in waited for r in c.fields.get("members", "").split(",") if r.strip().isdigit()}
    if listed and victims <= listed:
        return listed
    sizes = set()
    for c in timeouts:
        op, given, made = c.fields.get("op", ""), _int(c.fields.get("numel_in")), _int(c.fields.get("numel_out"))
        if not given or not made:
            continue
        if "ALLGATHER" in op and made % given == 0:
            sizes.add(made // given)
        elif "REDUCE_SCATTER" in op and given % made == 0:
            sizes.add(given // made)
    if len(sizes) != 1:
        return set()
    (size,) = sizes
    return set(range(size)) if victims and max(victims) < size else set()


def _timeout_each_rank_shares(timeouts: list[Candidate]) -> list[Candidate]:
    """A rank's timeout lines, the one most other ranks also report first: a rank that printed two timeouts (a
    second process group's, an earlier watchdog's `what():` echo) is read by the collective it shares with its
    peers, not taken for a desync by whichever line came first."""
    by_rank: dict[int, list[Candidate]] = {}
    for c in timeouts:
        if c.rank is not None:
            by_rank.setdefault(c.rank, []).append(c)

    def signature(c: Candidate) -> tuple[object, ...]:
        return (c.fields.get("seq"), c.fields.get("op"))

    shared = Counter(sig for lines in by_rank.values() for sig in {signature(c) for c in lines})
    ordered: list[Candidate] = []
    for lines in by_rank.values():
        # the most shared signature; among equals the line printed first (max keeps the first of equal keys)
        best = max(lines, key=lambda c: shared[signature(c)])
        ordered += [best] + [c for c in lines if c is not best]
    return ordered


_BLAMED = "named by another rank's monitoredBarrier as the peer it waited for in vain"
_EARLY_STOP = "early-stop-logged"
_STOPPED_EARLY = "logged that it stopped training early while the others went on"


def analyze_hang(
    candidates: list[Candidate],
    expected: set[int],
    seen: set[int] = frozenset(),
    launcher_failed: set[int] | None = None,
) -> HangAnalysis | None:
    """`seen`: ranks with any line; `launcher_failed`: the ranks a launcher reported failing or stopped
    (None when no launcher report is in the logs)."""
    timeouts = [c for c in candidates if c.pattern is not None and c.pattern.id in _TIMEOUT_PATTERNS]
    # Lines that show a rank waited in a collective. The generic teardown notice (priority below
    # WAIT_EVIDENCE) also follows NCCL errors, so alone it does not make a hang.
    waited = [c for c in candidates if c.role == "symptom" and c.category == "hang" and c.priority >= WAIT_EVIDENCE]
    if not waited:
        return None
    per_rank: dict[int, dict[str, object]] = {}
    for c in _timeout_each_rank_shares(timeouts):
        entry = per_rank.setdefault(cast(int, c.rank), {"rank": c.rank})
        for key in ("seq", "op", "numel_in", "timeout_ms", "ran_ms"):
            if c.fields.get(key) is not None:
                entry.setdefault(key, c.fields[key])
    groups: dict[int, str] = {}  # rank -> the process group its watchdog status line names
    for c in candidates:
        if c.pattern is not None and c.pattern.id == _STATUS_PATTERN and c.rank is not None:
            if c.fields.get("pg") is not None:
                groups[c.rank] = c.fields["pg"]
            entry = per_rank.setdefault(c.rank, {"rank": c.rank})
            entry["enqueued"] = _int(group_value(c.fields, "enqueued"))
            entry["completed"] = _int(group_value(c.fields, "completed"))
    # Victims are the ranks that timed out. Only when no rank printed a timeout at all (a paste with just
    # a flight-recorder notice) do the other hang lines stand in: a notified rank may not even be in the
    # stuck collective, so it must not drown out a straggler found by the timeouts.
    victims = set(per_rank) or {c.rank for c in waited if c.rank is not None and c.subcategory != "straggler"}
    # a rank the launcher saw die of SIGABRT after the timeouts was taken down by its own watchdog: it timed out too
    victims |= {c.rank for c in candidates if c.subcategory == WATCHDOG_ABORT and c.rank is not None}
    named = {
        int(r)
        for c in waited
        for r in [c.fields.get("suspect", "")] + c.fields.get("more", "").split(",")
        if r.strip().isdigit()
    }
    never_entered = {
        r for r, e in per_rank.items() if e.get("enqueued") is not None and e.get("enqueued") == e.get("completed")
    }
    terminated = {c.rank for c in candidates if c.subcategory == "teardown" and c.rank is not None}
    # a rank whose own early-stopping logic ended its loop while the others trained on (a metric only it saw)
    stopped_early = {c.rank for c in candidates if c.pattern is not None and c.pattern.id == _EARLY_STOP}
    stopped_early = stopped_early if None not in stopped_early else set()
    active = {c.rank for c in candidates if c.rank is not None}
    silent = expected - victims - active
    left = ranks_that_left(candidates, seen, launcher_failed) - victims
    # Every rank's output is here (a --log-dir tree), some ranks timed out and the rest printed other lines
    # but no timeout: those were not waiting in the collective (busy elsewhere, or already gone).
    bystanders = seen - victims if victims and expected and seen >= expected and _whole_world(expected) else set()
    if len(bystanders) > len(victims):
        bystanders = set()
    by_signature: dict[tuple[object, ...], set[int]] = {}  # (SeqNum, op, size) -> the ranks waiting in it
    for r, e in per_rank.items():
        if e.get("seq"):
            by_signature.setdefault((e.get("seq"), e.get("op"), e.get("numel_in")), set()).add(r)
    reported_desync = any(c.subcategory == "desync" for c in waited)  # c10d's own collective fingerprint check
    subcategory = "desync" if len(by_signature) > 1 or reported_desync else None
    # the one rank whose collective differs from what several others wait in took another code path
    odd_one = _lone_rank(list(by_signature.values()))
    if not odd_one and (odd_one := _odd_call_site(timeouts)):
        subcategory = subcategory or "desync"
    behind: set[int] = set()
    seqs = {r: _int(str(e["seq"])) for r, e in per_rank.items() if e.get("seq")}
    same_group = bool(seqs) and all(r in groups for r in seqs) and len({groups[r] for r in seqs}) == 1
    if len({s for s in seqs.values()}) > 1:
        low = min(s for s in seqs.values() if s is not None)
        behind = {r for r, s in seqs.items() if s == low}
    lower_seq = bool(behind) and len(behind) < len(seqs)
    # a store barrier that counted as many workers as the world has, or more, and still timed out waited for no
    # one: keys left in the store by an earlier attempt pushed the count past the world size
    overfull = any(
        (joined := _int(c.fields.get("joined"))) is not None
        and (world := _int(c.fields.get("world"))) is not None
        and joined >= world
        for c in waited
    )
    if overfull:
        suspects, reason = set(), _OVERFULL
    elif named:
        suspects, reason = (
            named,
            "named by the waiting ranks (a monitored barrier, an NCCL unique-id wait) as never arriving",
        )
    elif odd_one:
        suspects, reason = odd_one, "waited in a different collective than the others at the same point (a desync)"
    elif len(stopped_early) == 1:
        suspects, reason = stopped_early, _STOPPED_EARLY
    elif never_entered:
        suspects, reason = never_entered, "last enqueued work == last completed work: never entered the collective"
    elif terminated - victims:
        # a rank whose collective broke when a timed-out peer exited (gloo's "Connection closed by peer") was in it
        # too; the stopped rank that printed neither is the one that never came
        suspects = (terminated - victims - _peer_closed(candidates)) or (terminated - victims)
        reason = "printed no timeout and was still running when torchrun stopped it"
    elif left and launcher_failed:
        suspects, reason = (
            left,
            "printed no timeout or error and had already exited when the launcher stopped the others",
        )
    elif bystanders:
        suspects, reason = bystanders, "printed lines of its own but no timeout while the others timed out"
    elif lower_seq and same_group:
        # SeqNums of one process group that the ranks printed themselves outweigh the silence of ranks a paste
        # may simply have left out
        suspects, reason = behind, _LOWER_SEQ
    elif len(victims) == 1 and len(others := _group_members(timeouts, victims, waited) - victims - active) == 1:
        # one rank's output alone says nothing about the others, unless its collective had one other member
        suspects, reason = others, "the only other rank of the collective the one logged rank waited in"
    elif silent and len(victims) > 1 and _whole_world(expected):
        # One visible rank says nothing about the others (a paste of one rank's output); several ranks
        # timing out while one prints nothing does, when ranks 0..max look like the whole job.
        suspects, reason = silent, "printed nothing while the others timed out"
    elif lower_seq:
        suspects, reason = behind, _LOWER_SEQ
    elif launcher_failed and victims and seen <= victims and launcher_failed <= victims:
        # A collective needs at least one more rank than the ones seen waiting; the launcher reported no other
        # failure and stopped no other worker, so those ranks had already exited: their number is not logged.
        # Those ranks are the silent ones when a printed world size says which exist.
        suspects = silent
        reason = (
            "printed nothing and was not reported by the launcher: it had already exited"
            if silent
            else "the ranks it waited for are not in these logs and had already exited"
        )
        subcategory = subcategory or "early_exit"
    else:
        suspects, reason = set(), "every rank timed out; no rank stands out"
    if subcategory is None and suspects and suspects != victims:
        subcategory = "early_exit" if suspects == left else "straggler"
    telling = max(
        (c for c in waited if c.subcategory in ("desync", "straggler")), key=lambda c: c.priority, default=None
    )
    blamed = blamed_by_monitored_barrier(candidates)
    if blamed is not None and telling is None and barrier_timed_out(candidates) and blamed[0] not in victims - suspects:
        # a rank's monitoredBarrier named the peer it waited for in vain, and no line names the missing rank itself
        # (rank 0's "Rank 2 failed to pass monitoredBarrier") nor has the named peer time out: that peer is the
        # straggler, whatever the other clues say
        suspects, reason = {blamed[0]}, _BLAMED
    for rank in suspects | silent:
        per_rank.setdefault(rank, {"rank": rank, "note": "no timeout printed"})
    table = tuple(per_rank[r] for r in sorted(per_rank))
    return HangAnalysis(
        subcategory,
        tuple(sorted(suspects)),
        tuple(sorted(victims - suspects)),
        tuple(sorted(silent)),
        reason,
        table,
        telling,
    )


_BARRIER_BLAME = "monitored-barrier-peer-errors"


def blamed_by_monitored_barrier(candidates: list[Candidate]) -> tuple[int, Candidate] | None:
    """A rank that reached monitoredBarrier but got errors from a peer names that peer ("Please check rank 0 logs
    for faulty rank"): with nothing else failing in the logs, the peer named is where the failure is."""
    reports = [c for c in candidates if c.pattern is not None and c.pattern.id == _BARRIER_BLAME]
    faulty = {int(c.fields["faulty"]) for c in reports if c.fields.get("faulty", "").isdigit()}
    if len(faulty) != 1:
        return None
    return faulty.pop(), min(reports, key=lambda c: (c.file, c.line))


_BARRIER_WAIT_ENDED = {"gloo-timeout", "join-uneven-workload"}


def barrier_timed_out(candidates: list[Candidate]) -> bool:
    """The barrier's errors were a wait running out (gloo's recv timeout, WeNet's join giving up on uneven data),
    not a peer's connection breaking: the named rank was late, not dead."""
    return any(c.pattern is not None and c.pattern.id in _BARRIER_WAIT_ENDED for c in candidates)
