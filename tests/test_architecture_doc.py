"""docs/architecture.md stays true: every module it names exists, and the policy it shows is
the real one."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"


def _repo_files() -> list[str]:
    skip = {".venv", ".git", "build", "node_modules"}
    return [p.relative_to(REPO).as_posix() for p in REPO.rglob("*.py")
            if not skip & set(p.relative_to(REPO).parts)]


def test_every_module_the_map_names_exists() -> None:
    text = DOC.read_text()
    files = _repo_files()
    named = set(re.findall(r"([A-Za-z_][\w/]*\.py)\b", text))
    assert len(named) > 20
    missing = [n for n in sorted(named)
               if not any(f == n or f.endswith("/" + n) for f in files)]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_the_policy_it_shows_is_the_real_baseline() -> None:
    text = DOC.read_text()
    snippet = text.split("```python", 1)[1].split("```", 1)[0]
    source = (REPO / "topology" / "policies" / "baseline.py").read_text()
    code = [line.split("#")[0].strip() for line in snippet.splitlines()]
    code = [c for c in code if c]
    assert len(code) >= 8
    real = {line.strip() for line in source.splitlines()}
    assert [c for c in code if c not in real] == []
