"""A real OpenID Provider for the single sign-on tests: npm's ``oidc-provider`` (tests/desk/oidc/idp.mjs) run
with Node on 127.0.0.1, installed from the npm registry on first use (``npm ci`` into tests/desk/oidc/).

Without Node or npm the tests skip and say why; under ``CI=true`` that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

HERE = Path(__file__).resolve().parent / "oidc"
SECRET = "desk client secret for the tests"


def node_or_skip() -> None:
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        why = f"{' and '.join(missing)} not found: the single sign-on tests run a real OpenID Provider with Node"
        if os.environ.get("CI") == "true":
            pytest.fail(why + " (required when CI=true)")
        pytest.skip(why)
    if not (HERE / "node_modules" / "oidc-provider").is_dir():
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            why = f"npm ci in {HERE} failed: {done.stderr[-500:]}"
            if os.environ.get("CI") == "true":
                pytest.fail(why)
            pytest.skip(why)


@dataclass
class Idp:
    issuer: str
    process: subprocess.Popen[str]

    def accounts(self, **changes: dict[str, Any]) -> None:
        """Change people at the provider (their groups, disabled or not), as its administrator would."""
        r = httpx.post(f"{self.issuer}/_test/accounts", content=json.dumps(changes), timeout=5)
        assert r.status_code == 204, r.text


@contextmanager
def running_idp(port: int, redirects: list[str], accounts: dict[str, dict[str, Any]]) -> Iterator[Idp]:
    node_or_skip()
    env = {
        **os.environ,
        "IDP_PORT": str(port),
        "IDP_CLIENT_SECRET": SECRET,
        "IDP_REDIRECTS": " ".join(redirects),
        "IDP_ACCOUNTS": json.dumps(accounts),
    }
    proc = subprocess.Popen(
        ["node", str(HERE / "idp.mjs")], cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready "), f"the test IdP did not start: {line!r}"
        yield Idp(line.split()[1], proc)
    finally:
        proc.terminate()
        proc.wait(10)


def sign_in_headless(client: httpx.Client, desk: str, login: str, password: str) -> httpx.Response:
    """The flow as a browser follows it, with ``client`` (cookies kept), stopping at the desk's callback:
    returns the provider's redirect whose ``location`` is the callback URL (code and state)."""
    r = client.get(f"{desk}/signin/oidc?next=/queue")
    assert r.status_code == 303, r.text[:300]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = client.get(r.url.join(r.headers["location"]))
        if r.status_code in (302, 303) and str(r.url.join(r.headers["location"])).startswith(desk):
            return r
        if r.status_code == 200 and "Test IdP: sign in" in r.text:
            action = re.search(r'action="([^"]+)"', r.text)
            assert action is not None
            issuer = str(r.url).split("/interaction/")[0]
            r = client.post(issuer + action.group(1), data={"login": login, "password": password})
            if r.status_code == 200:  # the provider's page again: refused
                return r
        assert r.status_code in (302, 303), (r.status_code, r.text[:300])
    raise AssertionError("the sign-in flow did not come back to the desk")
