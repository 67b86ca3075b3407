"""The wheel: one import namespace (``signoff``), the templates and static files inside it,
and no generic top-level name (``audit``, ``bridge``, ``desk``) taken from users."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(ROOT)],
        check=True,
        timeout=600,
    )
    (found,) = out.glob("adk_signoff-*.whl")
    return found


def test_wheel_holds_only_the_signoff_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    dist_info = {top for top in tops if top.endswith(".dist-info")}
    assert tops - dist_info == {"signoff"}, sorted(tops)
    for needed in (
        "signoff/__init__.py",
        "signoff/py.typed",
        "signoff/audit/__init__.py",
        "signoff/audit/cli.py",
        "signoff/audit/migrations/env.py",
        "signoff/audit/migrations/versions/rev_0001_baseline.py",
        "signoff/bridge/__init__.py",
        "signoff/desk/app.py",
        "signoff/desk/routes/api.py",
        "signoff/desk/templates/base.html",
        "signoff/desk/templates/review.html",
        "signoff/desk/static/desk.js",
        "signoff/desk/static/desk.css",
    ):
        assert needed in names, needed
    assert not [name for name in names if "/tests/" in name or name.startswith(("tests/", "examples/"))]
    (entry_points,) = [name for name in names if name.endswith("entry_points.txt")]
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "audit = signoff.audit.cli:main" in scripts
    assert "desk = signoff.desk.cli:main" in scripts


def test_installed_wheel_imports_from_itself(wheel: Path, tmp_path: Path) -> None:
    """Installed alone (its dependencies from this environment), the wheel's own files answer
    every import, the desk finds its templates inside the package, and ``audit`` is no module."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(wheel)],
        check=True,
        timeout=300,
    )
    probe = (
        "import importlib.util, signoff.audit, signoff.desk.app as app\n"
        "from signoff import Signoff, apply_reviewed_args\n"
        "print(signoff.audit.__file__)\n"
        "print(app.TEMPLATES_DIR)\n"
        "print(Signoff.__module__, apply_reviewed_args.__module__)\n"
        "print([n for n in ('audit', 'bridge', 'desk') if importlib.util.find_spec(n) is not None])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    audit_file, templates, modules, top_level = done.stdout.splitlines()
    assert audit_file.startswith(str(target))
    assert templates == str(target / "signoff" / "desk" / "templates")
    assert modules == "signoff.bridge._signoff signoff.bridge._signoff"
    assert top_level == "[]"
