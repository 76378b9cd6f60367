#!/bin/bash
# Per-task wrapper: pins threads, optionally stages this rank's partition to node-local
# scratch (verified against the data manifest), picks the interpreter, then execs the trainer.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export PYTHONUNBUFFERED=1
PY=${SAGE_PYTHON:-/work/main/.venv/bin/python}
if [[ -n ${SAGE_STAGE_DIR:-} && -f data/MANIFEST ]]; then
    part=$(printf 'part-%02d.npz' "${SLURM_PROCID:-0}")
    dst=$SAGE_STAGE_DIR/data
    mkdir -p "$dst"
    for attempt in 1 2 3 4; do
        cp "data/$part" "$dst/$part.partial" && mv "$dst/$part.partial" "$dst/$part"
        want=$(awk -v p="$part" '$2 == p {print $1}' data/MANIFEST)
        have=$(sha256sum "$dst/$part" | cut -d' ' -f1)
        [[ $want == "$have" ]] && break
        echo "stage: $part checksum mismatch (attempt $attempt), retrying in 20 s" >&2
        sleep 20
    done
    for f in data/part-*.npz; do [[ -e $dst/${f##*/} ]] || ln -s "$PWD/$f" "$dst/${f##*/}"; done
    export SAGE_DATA_ROOT=$dst
fi
exec "$PY" "$@"
