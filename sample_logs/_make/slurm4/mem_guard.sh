#!/bin/bash
# mem_guard.sh LIMIT_MB [INTERVAL_S]
# Stand-in for the node's memory enforcement (cgroup OOM killer): every INTERVAL_S
# seconds, SIGKILL any process of this job whose resident set exceeds LIMIT_MB.
# Like the kernel, it writes nothing to the job's output.
limit_kb=$(( ${1:?limit MB} * 1024 ))
interval=${2:-1}
job=${SLURM_JOB_ID:?not inside a job}
self=$$
parent=$PPID
while sleep "$interval"; do
    kill -0 "$parent" 2>/dev/null || exit 0   # batch script gone: job over
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        [ "$pid" = "$self" ] && continue
        { tr '\0' '\n' < "$d/environ"; } 2>/dev/null | grep -qx "SLURM_JOB_ID=$job" || continue
        rss=$(awk '/^VmRSS:/ {print $2}' "$d/status" 2>/dev/null)
        [ -n "$rss" ] && [ "$rss" -gt "$limit_kb" ] && kill -9 "$pid" 2>/dev/null
    done
done
