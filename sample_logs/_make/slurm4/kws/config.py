"""Tiny YAML-subset config loader with Hydra-style command-line overrides.

Supported file syntax (enough for our experiment configs):

    # comment
    _base_: base.yaml          # merged first, path relative to this file
    model:
      arch: conformer
      d_model: 144
      kernel_sizes: [3, 3]
    optim:
      lr: 1.0e-3

Overrides on the command line follow Hydra's grammar for the simple cases:

    optim.lr=3e-4          set an existing key
    +trainer.note=abc      add a new key
    ~data.cache            delete a key
"""

from __future__ import annotations

import copy
import os
import re

__all__ = ["Config", "load_config", "apply_overrides", "ConfigError"]


class ConfigError(Exception):
    pass


class Config(dict):
    """dict with attribute access; nested dicts are Config too."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self[name] = value

    def get_path(self, dotted, default=None):
        node = self
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def to_dict(self):
        return {k: (v.to_dict() if isinstance(v, Config) else v) for k, v in self.items()}


_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")


def parse_scalar(text: str):
    s = text.strip()
    if s == "" or s in ("null", "~", "None"):
        return None
    if s in ("true", "True"):
        return True
    if s in ("false", "False"):
        return False
    if (s[0] == s[-1]) and s[0] in "'\"" and len(s) >= 2:
        return s[1:-1]
    if s.startswith("[") and s.endswith("]"):
        inner = s[1:-1].strip()
        return [parse_scalar(p) for p in inner.split(",")] if inner else []
    if _INT.match(s):
        return int(s)
    if _FLOAT.match(s):
        return float(s)
    return s


def _strip_comment(line: str) -> str:
    out, quote = [], None
    for ch in line:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            break
        out.append(ch)
    return "".join(out).rstrip()


def _parse_yaml(text: str, source: str) -> Config:
    root = Config()
    stack = [(-1, root)]
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, rest = line.strip().partition(":")
        if not sep:
            raise ConfigError(f"{source}:{lineno}: expected 'key: value', got {raw!r}")
        while stack and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        key = key.strip()
        if rest.strip() == "":
            node = Config()
            parent[key] = node
            stack.append((indent, node))
        else:
            parent[key] = parse_scalar(rest)
    return root


def _merge(dst: dict, src: dict):
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)
    return dst


def load_config(path: str) -> Config:
    with open(path, "r", encoding="utf-8") as fh:
        text = fh.read()
    cfg = _parse_yaml(text, path)
    base = cfg.pop("_base_", None)
    if base:
        base_path = base if os.path.isabs(base) else os.path.join(os.path.dirname(path), base)
        merged = load_config(base_path)
        _merge(merged, cfg)
        cfg = merged
    return cfg


def apply_overrides(cfg: Config, overrides):
    for ov in overrides:
        if ov.startswith("~"):
            *parents, leaf = ov[1:].split(".")
            node = cfg
            for p in parents:
                node = node[p]
            node.pop(leaf, None)
            continue
        add = ov.startswith("+")
        key, sep, value = ov.lstrip("+").partition("=")
        if not sep:
            raise ConfigError(f"Error parsing override '{ov}': missing '='")
        *parents, leaf = key.split(".")
        node = cfg
        for i, p in enumerate(parents):
            if p not in node:
                if not add:
                    raise ConfigError(
                        f"Could not override '{key}'.\nTo append to your config use +{ov}\n"
                        f"Key '{p}' is not in struct\n    full_key: {'.'.join(parents[: i + 1])}"
                    )
                node[p] = Config()
            node = node[p]
        if leaf not in node and not add:
            raise ConfigError(
                f"Could not override '{key}'.\nTo append to your config use +{ov}\n"
                f"Key '{leaf}' is not in struct\n    full_key: {key}"
            )
        node[leaf] = parse_scalar(value)
    return cfg
