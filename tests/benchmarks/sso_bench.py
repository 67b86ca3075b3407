"""Single sign-on's cost (issue 23 §1), against a real OpenID Provider on 127.0.0.1; prints JSON.

    .venv/bin/python tests/benchmarks/sso_bench.py [--rounds 40]

npm's ``oidc-provider`` under Node (tests/desk/oidc, installed on first use) and the desk served by uvicorn
in this process. Measured, p50/p95:

* ``sign_in_round_trip``: from ``GET /signin/oidc`` to the desk's session cookie, as a browser follows it
  (the provider's login page, the password posted, the code exchanged, the ID token checked);
* ``callback``: the desk's part of it alone (the code exchanged at the token endpoint, the ID token
  validated against the provider's keys, the session opened);
* ``queue_page`` with an SSO session against a password session: the provider's UserInfo answer each
  request waits for (desk/deps.py);
* beside them, in the same run: a password sign-in (scrypt, N=2^14) and one UserInfo request alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (ROOT, ROOT / "tests" / "desk"):
    sys.path.insert(0, str(p))

from idpkit import SECRET, running_idp, sign_in_headless  # noqa: E402
from livekit import free_port, serving  # noqa: E402

from signoff.audit import ReviewService, Signer, open_store  # noqa: E402
from signoff.audit.keys import read_private_key  # noqa: E402
from signoff.audit.store import default_admin_key  # noqa: E402

PASSWORD = "bench password 1"


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[max(0, round(0.95 * len(ordered)) - 1)] * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    rounds = parser.parse_args().rounds
    import pytest

    from signoff.desk.app import create_app
    from signoff.desk.auth import Accounts
    from signoff.desk.db import make_engine
    from signoff.desk.sso import Settings

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        url = f"sqlite:///{tmp / 'signoff.db'}"
        store = open_store(url)
        store.init_log(tmp / "log.pem")
        admin = read_private_key(default_admin_key(tmp / "log.pem"))
        ReviewService(store).enroll_reviewer(
            "human:bob@example.org", roles=["ops"], tools=["*"], key=Signer.generate().public, admin=admin
        )
        Accounts(make_engine(url), store.log_id).set_password("human:bob@example.org", PASSWORD, must_change=False)
        port = free_port()
        desk = f"http://localhost:{port}"
        people = {"bob": {"password": "bob pw", "email": "bob@example.org", "groups": []}}
        try:
            idp_context = running_idp(free_port(), [f"{desk}/signin/oidc/callback"], people)
            idp = idp_context.__enter__()
        except pytest.skip.Exception as exc:
            raise SystemExit(f"skipped: {exc}") from None
        try:
            settings = Settings(issuer=idp.issuer, client_id="desk", client_secret=SECRET)
            app = create_app(url, access_log=False, sso=settings, origin=desk)
            with serving(app, host="localhost", port=port):
                result = measure(app, desk, idp.issuer, rounds)
        finally:
            idp_context.__exit__(None, None, None)
        store.close()
    print(json.dumps(result, indent=2))


def measure(app: Any, desk: str, issuer: str, rounds: int) -> dict[str, Any]:
    import re

    trips, callbacks, password_trips = [], [], []
    for n in range(rounds + 2):
        client = httpx.Client(timeout=15, headers={"Origin": desk})
        t0 = time.perf_counter()
        back = sign_in_headless(client, desk, "bob", "bob pw")
        t1 = time.perf_counter()
        done = client.get(back.url.join(back.headers["location"]))
        t2 = time.perf_counter()
        assert done.status_code == 303 and "desk_session" in done.cookies, done.text[:200]
        if n >= 2:  # warm-up: the provider's metadata and keys fetched, connections made
            trips.append(t2 - t0)
            callbacks.append(t2 - t1)
        client.close()
    for n in range(rounds // 2 + 2):
        client = httpx.Client(base_url=desk, timeout=15, headers={"Origin": desk})
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/signin").text).group(1)  # type: ignore[union-attr]
        t0 = time.perf_counter()
        r = client.post("/signin", data={"csrf": csrf, "email": "bob@example.org", "password": PASSWORD})
        if n >= 2:
            password_trips.append(time.perf_counter() - t0)
        assert r.status_code == 303, r.text[:200]
        password_client = client
    sso_client = httpx.Client(base_url=desk, timeout=15, headers={"Origin": desk})
    back = sign_in_headless(sso_client, desk, "bob", "bob pw")
    sso_client.get(back.url.join(back.headers["location"]))

    def pages(client: httpx.Client) -> list[float]:
        out = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            assert client.get("/queue").status_code == 200
            out.append(time.perf_counter() - t0)
        return out

    provider = app.state.desks.default.sso
    from signoff.desk.sso import of_session

    token = str(sso_client.cookies.get("desk_session"))
    from signoff.desk.auth import token_hash

    held = of_session(app.state.desks.default.accounts.engine, token_hash(token))
    assert held is not None
    userinfo = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        assert provider.current(held.access_token) is not None
        userinfo.append(time.perf_counter() - t0)
    return {
        "rounds": rounds,
        "sign_in_round_trip": stats(trips),
        "callback": stats(callbacks),
        "password_sign_in": stats(password_trips),
        "queue_page_sso_session": stats(pages(sso_client)),
        "queue_page_password_session": stats(pages(password_client)),
        "userinfo_alone": stats(userinfo),
        "issuer": issuer,
    }


if __name__ == "__main__":
    main()
