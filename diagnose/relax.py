"""Loosen a pattern's regex into the prefilter's: same hit lines, far fewer reported match ends.

Hyperscan reports every END position a regex can match at, so a signature ending in `.*` or an optional
`(?:: (?P<message>.*))?` reports once per remaining character of the line: a 20 MB line meant 20
million Python callbacks. Dropping trailing optional or repeated pieces gives a regex that matches
wherever the original does (a relaxation), so no hit line is lost; the exact regex still runs on the
line afterwards.
"""

from __future__ import annotations

_QUANTIFIERS = "*+?{"


def _split_alternatives(expression: str) -> list[str]:
    """Top-level `|` branches: a bare `|` atom separates them (atoms already respect escapes, classes, groups)."""
    branches: list[list[str]] = [[]]
    for atom, quantifier in _atoms(expression):
        if atom == "|" and not quantifier:
            branches.append([])
        else:
            branches[-1].append(atom + quantifier)
    return ["".join(branch) for branch in branches]


def _atoms(expression: str) -> list[tuple[str, str]]:
    """(atom, quantifier) pairs of one branch: a group, a class, an escape or a single character."""
    atoms: list[tuple[str, str]] = []
    i = 0
    while i < len(expression):
        start = i
        char = expression[i]
        if char == "\\":
            i += 2
        elif char == "[":
            i += 2 if expression[i + 1 : i + 2] == "]" else 1
            while i < len(expression) and expression[i] != "]":
                i += 2 if expression[i] == "\\" else 1
            i += 1
        elif char == "(":
            depth = 0
            in_class = False
            while i < len(expression):
                c = expression[i]
                if c == "\\":
                    i += 2
                    continue
                if in_class:
                    in_class = c != "]"
                elif c == "[":
                    in_class = True
                elif c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                    if depth == 0:
                        i += 1
                        break
                i += 1
        else:
            i += 1
        atom = expression[start:i]
        q_start = i
        if i < len(expression) and expression[i] in _QUANTIFIERS:
            if expression[i] == "{":
                close = expression.find("}", i)
                i = close + 1 if close > 0 else i + 1
            else:
                i += 1
            if i < len(expression) and expression[i] in "?+":
                i += 1  # lazy or possessive marker
        atoms.append((atom, expression[q_start:i]))
    return atoms


def _relax_branch(branch: str, allow_empty: bool) -> str:
    atoms = _atoms(branch)
    while atoms:
        atom, quantifier = atoms[-1]
        if quantifier.startswith("+"):
            atoms[-1] = (atom, "")  # one occurrence is the least the original needs
            continue
        if quantifier[:1] in ("*", "?") and (len(atoms) > 1 or allow_empty):
            atoms.pop()  # a trailing optional or repeated piece: the rest still has to match
            continue
        if not quantifier and (atom.startswith("(?:") or (atom.startswith("(") and not atom.startswith("(?"))):
            inner_start = 3 if atom.startswith("(?:") else 1
            atoms[-1] = (atom[:inner_start] + _relax(atom[inner_start:-1], allow_empty=True) + ")", "")
        break
    return "".join(atom + quantifier for atom, quantifier in atoms)


def _relax(expression: str, allow_empty: bool) -> str:
    return "|".join(_relax_branch(branch, allow_empty) for branch in _split_alternatives(expression))


def relax(expression: str) -> str:
    """A regex matching wherever `expression` matches, ending as early as it can."""
    return _relax(expression, allow_empty=False)
