"""``sso.required`` (SPEC.md §3): the IdP groups a role needs where the desk signs people in through single
sign-on, signed by an admin; written by anyone else, or changed behind the service's back, it is refused
or named by ``audit verify``. SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from auditkit import ADMIN, ALICE, Keys, relink, run_cli, sign_entry

from signoff.audit import ReviewService, Store, sso_required
from signoff.audit.errors import InvalidEntry, NotAllowed
from signoff.audit.verify import verify_store


def test_an_admin_requires_groups_per_role_and_the_latest_is_in_force(store: Store, keys: Keys) -> None:
    sso_required.require(store, "finance", ["grp-finance", "grp-controllers"], admin=keys.admin)
    sso_required.require(store, "ops", ["grp-ops"], admin=keys.admin)
    assert sso_required.requirements(store) == {
        "finance": ("grp-controllers", "grp-finance"),  # sorted, as signed
        "ops": ("grp-ops",),
    }
    sso_required.require(store, "finance", [], admin=keys.admin)  # lifted
    assert sso_required.requirements(store) == {"ops": ("grp-ops",)}
    assert sso_required.missing(sso_required.requirements(store), ["ops", "finance"], ["staff"]) == ["ops"]
    assert sso_required.missing(sso_required.requirements(store), ["ops"], ["grp-ops"]) == []
    assert verify_store(store).ok


def test_only_an_admin_writes_it(store: Store, keys: Keys, svc: ReviewService) -> None:
    size = store.size()
    with pytest.raises(NotAllowed, match="expected a key enrolled for an admin"):
        sso_required.require(store, "finance", [], admin=keys.alice)
    with pytest.raises(NotAllowed):
        sso_required.require(store, "finance", [], admin=keys.alice, actor=ALICE)
    assert store.size() == size
    # Written by a reviewer past the service's checks (straight into the transaction): verify names it.
    body = sso_required.body_of("finance", [])
    sig = sign_entry(store, keys.alice, sso_required.KIND, ALICE, body)
    forged = store.transact(lambda tx: tx.append(ALICE, sso_required.KIND, body, sig))
    report = verify_store(store)
    assert not report.ok and report.failure is not None and report.failure.seq == forged.seq


@pytest.mark.parametrize(
    ("role", "groups", "says"),
    [
        ("", ["g"], "body.role: expected a role name"),
        (" finance", ["g"], "body.role"),
        ("finance", ["two words"], "body.groups: expected a list of IdP group names without spaces"),
        ("finance", [f"g{n}" for n in range(40)], "body.groups: expected at most 32 groups"),
    ],
)
def test_a_bad_requirement_names_the_field(store: Store, keys: Keys, role: str, groups: list[str], says: str) -> None:
    size = store.size()
    with pytest.raises(InvalidEntry, match=says):
        sso_required.require(store, role, groups, admin=keys.admin)
    assert store.size() == size


def test_verify_names_a_requirement_changed_behind_the_services_back(store: Store, keys: Keys, store_url: str) -> None:
    """Someone with the database rewrites the requirement (and relinks the log after it): the admin's
    signature no longer verifies, and verify names the entry."""
    entry = sso_required.require(store, "finance", ["grp-finance"], admin=keys.admin)
    from auditkit import Db

    with Db(store_url) as db:
        relink(db, entry.seq, lambda data: data["body"].update(groups=["everyone"]))
    report = verify_store(store)
    assert not report.ok and report.failure is not None and report.failure.seq == entry.seq


def test_audit_sso_on_the_command_line(store: Store, keys: Keys, store_url: str, tmp_path: Path) -> None:
    admin = ["--admin-key", str(keys.write(ADMIN, tmp_path / "admin.pem"))]
    done = run_cli(store_url, None, "sso", "require", "finance", "--group", "grp-finance", *admin)
    assert done.returncode == 0, done.stderr
    assert "role finance: signing in needs one of the IdP groups grp-finance" in done.stdout
    done = run_cli(store_url, None, "sso", "show")
    assert done.stdout.strip() == "finance: one of grp-finance"
    done = run_cli(store_url, None, "sso", "require", "finance", "--group", "a b", *admin)
    assert done.returncode == 2 and "body.groups" in done.stderr
