"""The test command also checks types and lint, so CI and users run one command."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "src", "tests")
    if result.returncode != 0:
        pytest.fail(result.stdout[-5000:] + result.stderr[-2000:])


def test_mypy_strict_is_clean() -> None:
    result = _run("mypy", "--no-error-summary", "src/cronwheel")
    if result.returncode != 0:
        pytest.fail(result.stdout[-5000:] + result.stderr[-2000:])


# -- the import layers --------------------------------------------------------------------
# Lowest first: a module may import its own layer's modules and those of layers below it,
# never above. Within a layer, groups marked independent may not import each other.
# Every module of src/cronwheel belongs to exactly one layer (docs/architecture.md).
LAYERS: list[tuple[str, list[str]]] = [
    ("core", ["cronwheel.errors", "cronwheel.signals", "cronwheel.failpoints", "cronwheel.wakeup"]),
    ("domain", ["cronwheel.domain"]),
    ("wire", ["cronwheel.wire"]),
    ("store", ["cronwheel.store"]),
    ("engine", ["cronwheel.dispatch", "cronwheel.worker"]),
    ("observability", ["cronwheel.observability"]),
    ("web", ["cronwheel.web"]),
    ("edges", ["cronwheel.api", "cronwheel.dashboard", "cronwheel.client"]),
    (
        "entry",
        [
            "cronwheel.app",
            "cronwheel.app_settings",
            "cronwheel.app_batch",
            "cronwheel.node",
            "cronwheel.server",
            "cronwheel.cli",
            "cronwheel.bench",
            "cronwheel.examples",
            "cronwheel.simulate",
            "cronwheel.__main__",
            "cronwheel",
        ],
    ),
]
INDEPENDENT = {"engine", "edges"}  # dispatch/worker; api/dashboard/client
# The SDK client talks HTTP only: it reads the wire format, never the store (its own
# package's modules aside).
ONLY = {
    "cronwheel.client": [
        "cronwheel.client",
        "cronwheel.errors",
        "cronwheel.domain",
        "cronwheel.wire",
    ]
}


def _within(module: str, prefix: str) -> bool:
    """``module`` is ``prefix`` or inside it; the root package stands for itself only."""
    return module == prefix or (prefix != "cronwheel" and module.startswith(prefix + "."))


def _place(module: str) -> tuple[int, str, str] | None:
    """(layer index, layer name, group prefix) of a module: its longest matching prefix."""
    found: tuple[int, str, str] | None = None
    for index, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(module, prefix) and (found is None or len(prefix) > len(found[2])):
                found = (index, name, prefix)
    return found


def _modules(src: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path, known: set[str]) -> list[tuple[int, str, str | None]]:
    """(line, imported module, imported name) of every cronwheel import, lazy and
    TYPE_CHECKING ones included; ``from pkg import sub`` counts as importing ``pkg.sub``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append(
                    (node.lineno, sub, None) if sub in known else (node.lineno, base, alias.name)
                )
    return [(line, t, name) for line, t, name in found if t.split(".")[0] == "cronwheel"]


def layer_violations(src: Path) -> list[str]:
    modules = _modules(src)
    known = set(modules)
    problems: list[str] = []
    for module, path in modules.items():
        here = _place(module)
        if here is None:
            problems.append(f"{module}: in no layer (add it to LAYERS in tests/test_lint.py)")
            continue
        for line, target, name in _imports(module, path, known):
            where = f"{path.relative_to(src)}:{line}: {module} imports {target}"
            there = _place(target)
            if there is None:
                problems.append(f"{where}, which is in no layer")
                continue
            if there[0] > here[0]:
                problems.append(f"{where} ({here[1]} may not import {there[1]}, a higher layer)")
            elif there[0] == here[0] and here[1] in INDEPENDENT and there[2] != here[2]:
                problems.append(f"{where} ({here[2]} and {there[2]} are independent)")
            allowed = next((v for k, v in ONLY.items() if _within(module, k)), None)
            if allowed is not None and not any(_within(target, a) for a in allowed):
                problems.append(f"{where} (it may import only {', '.join(allowed)})")
            if name is not None and name.startswith("_") and not _within(target, module):
                problems.append(f"{where}'s private name {name}")
    return list(dict.fromkeys(problems))  # one line per crossing, not per name imported


def test_import_layers_hold() -> None:
    problems = layer_violations(ROOT / "src")
    assert not problems, "\n".join(problems)


def test_the_layer_check_catches_crossings(tmp_path: Path) -> None:
    pkg = tmp_path / "cronwheel"
    files = {
        "__init__.py": "",
        "errors.py": "",
        "domain/__init__.py": "",
        "domain/cron.py": "from cronwheel.errors import X\nfrom cronwheel.store import protocol\n",
        "store/__init__.py": "",
        "store/protocol.py": "import cronwheel.domain.cron\n",
        "dispatch/__init__.py": "",
        "dispatch/dispatcher.py": "from cronwheel.worker.worker import Worker\n",
        "worker/__init__.py": "",
        "worker/worker.py": "from cronwheel.bench.runner import _r\n",
        "bench/__init__.py": "",
        "bench/runner.py": "from cronwheel.store.protocol import _private\n",
        "api/__init__.py": "",
        "api/routes.py": "from cronwheel.dashboard import views\n",
        "dashboard/__init__.py": "",
        "dashboard/views.py": "from . import data\nfrom ..api import routes\n",
        "dashboard/data.py": "",
        "client.py": "from cronwheel.store.protocol import CancelResult\n",
        "stray.py": "",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    problems = "\n".join(layer_violations(tmp_path))
    assert "domain may not import store" in problems
    assert "cronwheel.dispatch and cronwheel.worker are independent" in problems
    assert "engine may not import entry" in problems
    assert "private name _private" in problems
    assert "cronwheel.api and cronwheel.dashboard are independent" in problems
    assert "cronwheel.dashboard and cronwheel.api are independent" in problems
    assert "it may import only" in problems
    assert "cronwheel.stray: in no layer" in problems
    assert "store/protocol.py" not in problems  # store may import the domain
    assert "imports cronwheel.dashboard.data" not in problems  # its own package
    assert len(problems.splitlines()) == 9, problems


def test_no_module_of_the_package_is_over_500_lines() -> None:
    """A module that grows past this is split along a seam, not left to sprawl."""
    too_long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "src" / "cronwheel").rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert not too_long, too_long
