"""The README's screenshots come from the real desk in Chromium (tests/desk/screenshots.py): this runs
the script, so it keeps working as the pages change, and checks that every picture the README shows
is one the script makes. ``SIGNOFF_UPDATE_SCREENSHOTS=1`` writes them to examples/screenshots/
(what the README shows); otherwise to a temporary directory."""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import pytest
from browserkit import ROOT, chromium_or_skip

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api")

SHOWN = ROOT / "examples" / "screenshots"


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def test_the_script_makes_every_screenshot_the_readme_shows(tmp_path: Path) -> None:
    chromium_or_skip()
    import screenshots

    out = SHOWN if os.environ.get("SIGNOFF_UPDATE_SCREENSHOTS") == "1" else tmp_path / "shots"
    made = screenshots.take(out, tmp_path / "demo")
    assert [p.name for p in made] == list(screenshots.SHOTS)
    for path in made:
        width, height = _png_size(path)
        assert width == screenshots.WIDTH and height >= 600, (path.name, width, height)
        assert path.stat().st_size > 20_000, f"{path.name} looks empty"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.findall(r"examples/screenshots/([\w-]+\.png)", readme)
    assert set(shown) <= set(screenshots.SHOTS), "the README shows a screenshot the script does not make"
    for name in shown:
        assert (SHOWN / name).exists(), f"examples/screenshots/{name} is missing: run tests/desk/screenshots.py"


def test_the_sealed_views_desktop_and_phone(tmp_path: Path) -> None:
    """A sealed log (``desk demo --sealed-values``): the queue and a review with their values revealed, an
    erased review and a tampered one, each at 1280 px and 390 px wide, into test-artifacts/ for a look."""
    chromium_or_skip()
    import screenshots

    made = screenshots.take_sealed(ROOT / "test-artifacts", tmp_path / "demo")
    assert [p.name for p in made] == list(screenshots.SEALED_SHOTS)
    for path in made:
        width, height = _png_size(path)
        wanted = screenshots.PHONE["width"] if path.name.endswith("-phone.png") else screenshots.WIDTH
        assert width == wanted and height >= 600, (path.name, width, height)
        assert path.stat().st_size > 20_000, f"{path.name} looks empty"
