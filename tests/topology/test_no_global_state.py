"""The core keeps no hidden process-wide state: no function in ``topology/`` changes a
module-level container or rebinds a module-level name (``global``), except the policy
registry, which is filled once at import. Caches live in objects the runner owns
(:class:`topology.policies.memo.Memo`, :class:`topology.policies.evaluate.Evaluator`);
``functools`` memoisation of pure functions of immutable arguments is allowed (it cannot change
a result)."""

from __future__ import annotations

import ast
from pathlib import Path

import topology

ROOT = Path(topology.__file__).parent
#: module (relative to topology/) -> module-level names it may change (the one registry)
ALLOWED = {"policies/registry.py": {"_REGISTRY", "_loaded"}}
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem",
            "clear", "remove", "discard", "move_to_end", "appendleft", "__setitem__"}


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _changes(tree: ast.Module, names: set[str]) -> set[tuple[int, str, str]]:
    """``(line, name, what)`` of every change to a module-level name inside a function."""
    found: set[tuple[int, str, str]] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Global):
                found.update((node.lineno, n, f"global {n}") for n in node.names)
            elif isinstance(node, ast.Subscript | ast.Attribute) and isinstance(
                    node.ctx, ast.Store | ast.Del):
                base = node.value
                if isinstance(base, ast.Name) and base.id in names:
                    found.add((node.lineno, base.id, f"{base.id}[...] = / del"))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                base = node.func.value
                if (isinstance(base, ast.Name) and base.id in names
                        and node.func.attr in MUTATORS):
                    found.add((node.lineno, base.id, f"{base.id}.{node.func.attr}()"))
    return found


def test_no_function_in_the_core_changes_module_level_state() -> None:
    problems = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text())
        allowed = ALLOWED.get(rel, set())
        for line, name, what in sorted(_changes(tree, _module_names(tree))):
            if name not in allowed:
                problems.append(f"topology/{rel}:{line}: {what}")
    assert not problems, "module-level state changed at run time:\n" + "\n".join(problems)


def test_the_scan_finds_a_module_level_cache() -> None:
    """The scan itself can fail: it flags the pattern the old decision cache used."""
    tree = ast.parse(
        "_cache = {}\nstats = {'hits': 0}\n"
        "def place(k):\n    _cache[k] = 1\n    stats['hits'] += 1\n    _cache.popitem()\n"
        "def clear():\n    global _rows\n    _rows = 0\n")
    found = {what for _, _, what in _changes(tree, _module_names(tree))}
    assert found == {"_cache[...] = / del", "stats[...] = / del", "_cache.popitem()",
                     "global _rows"}
