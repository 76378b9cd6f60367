"""TOML experiment configs with dotted `section.key=value` overrides."""
import ast
import copy
import tomllib


def _parse_value(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def load_config(path, overrides=()):
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    base = cfg.pop("include", None)
    if base:
        import os
        parent = load_config(os.path.join(os.path.dirname(path), base))
        merged = copy.deepcopy(parent)
        for section, values in cfg.items():
            merged.setdefault(section, {}).update(values)
        cfg = merged
    for item in overrides:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        cfg.setdefault(section, {})[name] = _parse_value(value)
    return cfg
