"""The desk's ``/tlog/`` (c2sp.org/tlog-tiles, read-only, with the caching headers the spec asks for), its
checkpoint publisher (``--checkpoint-every``), the receipt route and the unwitnessed-entries gauge."""

from __future__ import annotations

import time
from pathlib import Path

from deskkit import ALICE, BrowserClient, Env, sign_in

from signoff.audit.c2sp import log_vkey
from signoff.audit.keys import read_private_key
from signoff.audit.proofs import check_tlog_proof
from signoff.audit.tlog_tiles import tiles_for_size
from signoff.audit.verify import verify_tiles
from signoff.desk.app import create_app


def test_tlog_serves_the_tree_with_the_specs_caching_headers(env: Env, tmp_path: Path) -> None:
    review = env.open()[0]
    env.svc.approve(review.id, reviewer=ALICE, signer=env.signer_of(ALICE))
    with BrowserClient(create_app(env.url, env.key, access_log=False)) as plain:
        assert plain.get("/tlog/checkpoint").status_code == 404  # not served unless asked for
    point = env.desk.store.checkpoint(read_private_key(env.key))
    app = create_app(env.url, env.key, access_log=False, serve_tlog=True)
    with BrowserClient(app) as c:
        r = c.get("/tlog/checkpoint")  # no sign-in: any HTTP client mirrors it
        assert r.status_code == 200 and r.text == point.note
        assert r.headers["content-type"] == "text/plain; charset=utf-8"
        assert r.headers["cache-control"] == "public, max-age=5"
        out = tmp_path / "mirror"
        for tile in tiles_for_size(point.size):
            got = c.get(f"/tlog/{tile.path}")
            assert got.status_code == 200 and got.headers["content-type"] == "application/octet-stream"
            assert "immutable" in got.headers["cache-control"]
            (out / tile.path).parent.mkdir(parents=True, exist_ok=True)
            (out / tile.path).write_bytes(got.content)
        bundle = c.get(f"/tlog/tile/entries/000.p/{point.size}")
        assert bundle.status_code == 200
        (out / f"tile/entries/000.p/{point.size}").parent.mkdir(parents=True, exist_ok=True)
        (out / f"tile/entries/000.p/{point.size}").write_bytes(bundle.content)
        (out / "checkpoint").write_bytes(r.content)
        assert c.get("/tlog/tile/0/001").status_code == 404  # beyond the checkpoint
        assert c.get("/tlog/../signoff.db").status_code == 404
    store = env.desk.store
    assert verify_tiles(str(out), log_vkey=log_vkey(store.rules.origin, store.public_key)).ok


def test_the_desk_publishes_checkpoints_on_a_schedule(env: Env) -> None:
    app = create_app(env.url, env.key, access_log=False, checkpoint_every=0.2)
    with BrowserClient(app) as c:
        store = env.desk.store
        before = len(store.checkpoints())
        review = env.open()[0]
        env.svc.approve(review.id, reviewer=ALICE, signer=env.signer_of(ALICE))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(p.size > review.opened_seq + 1 for p in store.checkpoints()):
            time.sleep(0.05)
        assert len(store.checkpoints()) > before and store.latest_checkpoint().note  # type: ignore[union-attr]
        metrics = c.get("/metrics").text
        assert "signoff_unwitnessed_entries" in metrics and "signoff_projection_alarms" in metrics
        sign_in(c)
        receipt = c.get(f"/reviews/{review.id}/receipt.tlog-proof")
        assert receipt.status_code == 200, receipt.text
        checked = check_tlog_proof(receipt.content, log_vkey(store.rules.origin, store.public_key))
        assert checked.entry["body"]["review"] == review.id and checked.entry["kind"] == "review.approved"
        page = c.get(f"/reviews/{review.id}").text
        assert 'id="witnessed"' in page and "receipt.js" in page
