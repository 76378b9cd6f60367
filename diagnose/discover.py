"""Find a job's log files and recognise the layout each belongs to.

The layout carries identity the text may not: torchrun's `--log-dir` tree names the attempt and the
LOCAL rank (`<run>/attempt_N/<local_rank>/stderr.log`), never the host or global rank; SLURM files
name the job (`slurm-12345.out`, `%x-%j.err`); the launcher's manifest maps everything to global
ranks. Nothing here reads file contents except manifests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import regex

_SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", ".ipynb_checkpoints"}
_SKIP_SUFFIXES = {
    ".py",
    ".pyc",
    ".so",
    ".o",
    ".pt",
    ".pth",
    ".ckpt",
    ".safetensors",
    ".bin",
    ".pkl",
    ".npy",
    ".npz",
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".svg",
    ".pdf",
    ".toml",
    ".yaml",
    ".yml",
    ".md",
    ".sh",
    ".sbatch",
    ".slurm",
    ".ipynb",
    ".csv",
    ".parquet",
    ".db",
    ".sqlite",
    ".whl",
    ".tar",
    ".zip",
}
_TORCHRUN = regex.compile(
    r"(?:^|/)attempt_(?P<attempt>\d+)/(?P<local>\d+)/(?P<name>stdout\.log|stderr\.log|error\.json)$"
)
MANIFEST_NAMES = ("manifest.json", "launcher-manifest.json")
# a file a training script named after the global rank that writes it (rank_3.log, log_rank_3.txt), or a folder
# named only that (rank3/train.log); a folder that merely mentions a rank (`oom-on-rank3/`) says nothing
_RANK_NAMED_FILE = regex.compile(r"(?:^|[_.\-])rank[_\-]?(?P<rank>\d{1,7})(?:[_.\-]|$)", regex.IGNORECASE)
_RANK_NAMED_DIR = regex.compile(r"rank[_\-]?(?P<rank>\d{1,7})", regex.IGNORECASE)


@dataclass(frozen=True)
class LogFile:
    """A file to analyse and what its place in the tree says about its writer."""

    path: Path
    kind: str  # "log" | "error_json"
    stream: str | None = None  # stdout | stderr
    attempt: int | None = None
    local_rank: int | None = None
    run_dir: str | None = None  # torchrun run directory: one per node and launch
    rank: int | None = None  # global rank, when a manifest says so
    host: str | None = None


@dataclass(frozen=True)
class Manifest:
    path: Path
    data: dict[str, object]


@dataclass(frozen=True)
class Discovery:
    files: tuple[LogFile, ...]
    manifests: tuple[Manifest, ...]
    warnings: tuple[str, ...]


def _stream_of(name: str) -> str | None:
    lowered = name.lower()
    if lowered.endswith((".err", "stderr.log", ".stderr")) or ".err." in lowered:
        return "stderr"
    if lowered.endswith((".out", "stdout.log", ".stdout")) or ".out." in lowered:
        return "stdout"
    return None


def classify_path(path: Path) -> LogFile | None:
    """Layout facts from a path alone, or None for files that are not logs."""
    name = path.name
    posix = path.as_posix()
    if (m := _TORCHRUN.search(posix)) is not None:
        run_dir = posix[: m.start()].rstrip("/") if m.start() else "."
        kind = "error_json" if m["name"] == "error.json" else "log"
        return LogFile(path, kind, _stream_of(name), int(m["attempt"]), int(m["local"]), run_dir)
    if name.startswith(".") or name in MANIFEST_NAMES or name == "expected.toml":
        return None
    base = name
    for compressed in (".gz", ".bz2", ".xz", ".zst"):
        base = base.removesuffix(compressed)
    suffix = Path(base).suffix.lower()
    if suffix in _SKIP_SUFFIXES:
        return None
    if suffix == ".json":
        return LogFile(path, "error_json") if name.startswith("error") else None
    return LogFile(path, "log", _stream_of(base), rank=_rank_named(path))


def _rank_named(path: Path) -> int | None:
    """The global rank a file's own name, or its folder's, gives it (`rank_3.log`, `rank3/train.log`)."""
    named = _RANK_NAMED_FILE.search(path.name) or _RANK_NAMED_DIR.fullmatch(path.parent.name)
    return int(named["rank"]) if named else None


def _mentions_job(path: Path, job: str) -> bool:
    return regex.search(rf"(?<![0-9]){regex.escape(job)}(?![0-9])", path.as_posix()) is not None


def discover(paths: list[str], job: str | None = None) -> Discovery:
    """Every log file under `paths` (files given explicitly are always taken), filtered to `job`."""
    files: list[LogFile] = []
    manifests: list[Manifest] = []
    warnings: list[str] = []
    for given in paths:
        root = Path(given)
        if root.is_file():
            found = classify_path(root) or LogFile(root, "log", _stream_of(root.name))
            files.append(found)
            continue
        if not root.exists():
            warnings.append(f"{given}: no such file or directory")
            continue
        candidates = []
        for path in sorted(_walk(root, warnings)):
            if path.name in MANIFEST_NAMES:
                manifest = _read_manifest(path, warnings)
                if manifest is not None:
                    manifests.append(manifest)
                continue
            found = classify_path(path)
            if found is not None:
                candidates.append(found)
        if job is not None:
            owned = [m.path.parent for m in manifests if str(m.data.get("job_id")) == job]
            matching = [
                f
                for f in candidates
                if _mentions_job(f.path.relative_to(root), job) or any(d in f.path.parents for d in owned)
            ]
            if not matching and _mentions_job(root.resolve(), job):
                matching = candidates
            candidates = matching
        files.extend(candidates)
    return Discovery(tuple(_apply_manifests(files, manifests)), tuple(manifests), tuple(warnings))


def _walk(root: Path, warnings: list[str]) -> list[Path]:
    found: list[Path] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(directory.iterdir())
        except OSError as exc:
            warnings.append(f"{directory}: cannot list ({exc.strerror or exc})")
            continue
        for entry in entries:
            if entry.is_symlink() and entry.is_dir():
                continue  # a link loop must not hang the walk
            if entry.is_dir():
                if entry.name not in _SKIP_DIRS:
                    stack.append(entry)
            elif entry.is_file():
                found.append(entry)
    return found


def _read_manifest(path: Path, warnings: list[str]) -> Manifest | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        warnings.append(f"{path}: manifest unreadable ({exc}); ranks are inferred from the logs instead")
        return None
    return Manifest(path, data) if isinstance(data, dict) else None


_MAX_RANK = 10**7


def _rank_table(mapping: object) -> dict[int, int]:
    """local -> global ranks from a manifest; entries that are not small whole numbers (a hand-edited or corrupt
    manifest) are left out rather than trusted."""
    table: dict[int, int] = {}
    for local, rank in mapping.items() if isinstance(mapping, dict) else ():
        if str(local).isdigit() and str(rank).isdigit() and int(local) < _MAX_RANK and int(rank) < _MAX_RANK:
            table[int(local)] = int(rank)
    return table


def _apply_manifests(files: list[LogFile], manifests: list[Manifest]) -> list[LogFile]:
    """Global rank and host for torchrun-tree files, from the launcher's manifest (launcher/run.py)."""
    if not manifests:
        return files
    by_dir: dict[str, tuple[str | None, dict[int, int]]] = {}
    for manifest in manifests:
        for node in manifest.data.get("nodes", []) if isinstance(manifest.data.get("nodes"), list) else []:
            if not isinstance(node, dict) or "log_dir" not in node:
                continue
            log_dir = (manifest.path.parent / str(node["log_dir"])).resolve().as_posix()
            host = node.get("host")
            by_dir[log_dir] = (host if isinstance(host, str) else None, _rank_table(node.get("local_to_global")))
    out = []
    for file in files:
        resolved = file.path.resolve().as_posix()
        match = next((d for d in by_dir if resolved.startswith(d + "/")), None)
        if match is None or file.local_rank is None:
            out.append(file)
            continue
        host, ranks = by_dir[match]
        out.append(
            LogFile(
                file.path,
                file.kind,
                file.stream,
                file.attempt,
                file.local_rank,
                file.run_dir,
                ranks.get(file.local_rank),
                host,
            )
        )
    return out
