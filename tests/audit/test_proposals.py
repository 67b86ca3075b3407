"""Standing rules from a review (issue 22 §5; SPEC.md §7 rule 7): a reviewer proposes "allow this from now
on" (``policy.proposed``, signed by them); it changes nothing until an admin approves it, which signs the
proposed ``policy.set`` exactly, or declines it. Then the next matching call is auto-approved on the log.
``audit verify`` holds a log to the same rules: the attacker's tests write entries straight into the
database, signed with keys the attacker holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from auditkit import AGENT, ALICE, BOB, Db, Keys, call, forge_append, run_cli, snapshot

from signoff.audit import ReviewService, Store
from signoff.audit.errors import InvalidEntry, NotAllowed
from signoff.audit.policies import needs_person, parse, rule_inputs
from signoff.audit.proposals import ProposalRefused, allow_rule, literal
from signoff.audit.store import default_admin_key
from signoff.audit.verify import verify_store

MAIL = {"policy": "mail", "tools": "send_*", "role": "ops", "review_when": "args.size > 10"}


@pytest.fixture
def mail(svc: ReviewService, keys: Keys) -> ReviewService:
    """Alice may decide mail (role ops); Bob is an intern (lookup* only). The mail policy reviews big mails."""
    svc.enroll_reviewer(ALICE, roles=["ops", "teller"], tools=["*"], replace=True, admin=keys.admin)
    svc.set_policy(MAIL, admin=keys.admin)
    return svc


def _mail(to: str, cid: str, size: int = 20, agent: str = "mailer") -> Any:
    return call(cid, tool="send_email", args={"to": to, "size": size}, agent=agent)


def _opened(svc: ReviewService, to: str = "bob@example.com", cid: str = "p-1") -> Any:
    return svc.open_frontier([_mail(to, cid)], actor=AGENT).reviews[0]


def _auto(svc: ReviewService, to: str, cid: str, agent: str = "mailer") -> str:
    review, why = svc.auto_approve(_mail(to, cid, agent=agent), actor=AGENT)
    return review.status if review is not None else why


def test_proposed_then_approved_then_in_force(mail: ReviewService, keys: Keys, store: Store) -> None:
    review = _opened(mail)
    draft = mail.draft_proposal(review.id, conditions=[("to", "ends_with", "@example.com")])
    rule = draft["policy"]["review_when"]
    assert (
        rule
        == '(args.size > 10) && !(tool == "send_email" && agent == "mailer" && args["to"].endsWith("@example.com"))'
    )
    assert {k: v for k, v in draft["policy"].items() if k != "review_when"} == {
        k: v for k, v in MAIL.items() if k != "review_when"
    }
    made = mail.propose(draft, proposer=ALICE, signer=keys.alice)
    entry = store.entry(made.seq)
    assert (entry.kind, entry.actor, entry.sig is not None, made.state) == ("policy.proposed", ALICE, True, "open")
    # Until an admin approves it, nothing changes: a matching big mail still needs a person.
    assert _auto(mail, "carl@example.com", "p-2") == "the rule says a person must review"
    approved = mail.approve_proposal(made.id, admin=keys.admin)
    assert approved.kind == "policy.set" and approved.body == {**draft["policy"], "proposal": made.id}
    assert mail.proposal(made.id).state == "approved"  # type: ignore[union-attr]
    # In force: the next matching call runs with no person asked, recorded as auto-approved by that policy.
    assert _auto(mail, "carl@example.com", "p-3") == "auto_approved"
    auto = next(e for e in store.entries(start=approved.seq) if e.kind == "review.auto_approved")
    assert auto.body["policy"]["seq"] == approved.seq
    assert _auto(mail, "x@evil.example", "p-4") == "the rule says a person must review"  # another domain
    assert _auto(mail, "carl@example.com", "p-5", agent="other") == "the rule says a person must review"
    report = verify_store(store)
    assert report.ok, report.failure


def test_proposed_then_declined_changes_nothing(mail: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    review = _opened(mail)
    made = mail.propose(mail.draft_proposal(review.id, conditions=[]), proposer=ALICE, signer=keys.alice)
    declined = mail.decline_proposal(made.id, reason="too broad: every mail of this agent", admin=keys.admin)
    assert declined.kind == "policy.declined"
    found = mail.proposal(made.id)
    assert found is not None and (found.state, found.reason) == ("declined", "too broad: every mail of this agent")
    assert _auto(mail, "bob@example.com", "p-6") == "the rule says a person must review"
    before = snapshot(store_url)
    with pytest.raises(ProposalRefused, match="expected it open, found it declined"):
        mail.approve_proposal(made.id, admin=keys.admin)
    with pytest.raises(ProposalRefused, match="expected it open, found it declined"):
        mail.decline_proposal(made.id, reason="again", admin=keys.admin)
    assert snapshot(store_url) == before
    assert verify_store(store).ok


def test_a_proposal_built_on_a_policy_since_replaced_is_not_approved(mail: ReviewService, keys: Keys) -> None:
    review = _opened(mail)
    made = mail.propose(mail.draft_proposal(review.id, conditions=[]), proposer=ALICE, signer=keys.alice)
    mail.set_policy({**MAIL, "approvals": 2}, admin=keys.admin)  # the admin tightened it meanwhile
    with pytest.raises(ProposalRefused, match="propose again on the current policy"):
        mail.approve_proposal(made.id, admin=keys.admin)


def test_a_tool_with_no_policy_gets_one_of_its_own(svc: ReviewService, keys: Keys, store: Store) -> None:
    review = svc.open_frontier([call("p-new", tool="lookup_account", args={"id": 7})], actor=AGENT).reviews[0]
    draft = svc.draft_proposal(review.id, conditions=[("id", "at_most", 10)], agent=False)
    assert draft["base"] is None and draft["policy"] == {
        "policy": "allow-lookup_account",
        "tools": "lookup_account",
        "review_when": '!(tool == "lookup_account" && args["id"] <= 10)',
    }
    made = svc.propose(draft, proposer=BOB, signer=keys.bob)  # Bob decides lookup* himself
    svc.approve_proposal(made.id, admin=keys.admin)
    auto, _why = svc.auto_approve(call("p-new-2", tool="lookup_account", args={"id": 3}), actor=AGENT)
    assert auto is not None and auto.status == "auto_approved"
    assert verify_store(store).ok


def test_who_may_propose(mail: ReviewService, keys: Keys, store: Store, store_url: str) -> None:
    review = _opened(mail)
    draft = mail.draft_proposal(review.id, conditions=[])
    before = snapshot(store_url)
    with pytest.raises(ProposalRefused, match="own roles cover send_email with role ops"):
        mail.propose(draft, proposer=BOB, signer=keys.bob)  # an intern: lookup* only
    with pytest.raises(NotAllowed, match="expected an enrolled, enabled reviewer, found agent:teller"):
        mail.propose(draft, proposer=AGENT)
    with pytest.raises(NotAllowed, match="expected a signature by one of"):
        mail.propose(draft, proposer=ALICE)  # unsigned
    with pytest.raises(ProposalRefused, match="expected an enrolled, enabled reviewer"):
        mail.propose(draft, proposer="human:carol@example.org", signer=keys.carol)  # disabled
    tampered = {**draft, "base": None}
    with pytest.raises(ProposalRefused, match="body.base: expected the policy in force"):
        mail.propose(tampered, proposer=ALICE, signer=keys.alice)
    assert snapshot(store_url) == before
    made = mail.propose(draft, proposer=ALICE, signer=keys.alice)
    with pytest.raises(ProposalRefused, match="proposed already"):
        mail.propose(draft, proposer=ALICE, signer=keys.alice)
    assert made.state == "open"


def test_a_draft_must_let_its_own_call_through(mail: ReviewService) -> None:
    review = _opened(mail, to="bob@example.com")
    with pytest.raises(InvalidEntry, match="lets this very call through"):
        mail.draft_proposal(review.id, conditions=[("to", "ends_with", "@other.org")])
    with pytest.raises(InvalidEntry, match="conditions.to: expected one of equals, ends_with, at_most"):
        mail.draft_proposal(review.id, conditions=[("to", "matches", ".*")])
    with pytest.raises(InvalidEntry, match="conditions.size: expected a number"):
        mail.draft_proposal(review.id, conditions=[("size", "at_most", "lots")])


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3, "3"),
        (2.5, "2.5"),
        (1e21, "1e+21"),
        (7.0, "7.0"),
        (True, "true"),
        ('say "hi" \\ \n', '"say \\"hi\\" \\\\ \\n"'),
        ("é", '"\\u00e9"'),
    ],
)
def test_literals_are_cel_literals(value: Any, text: str) -> None:
    """Each literal parses as CEL and equals the JSON value it came from, as the rule sees that value."""
    assert literal(value) == text
    policy = parse({"policy": "p", "tools": "t", "review_when": f"!(args.v == {text})"})
    inputs = rule_inputs(policy, args={"v": value}, tool="t", agent="", app="", user="")
    assert needs_person(policy, inputs) == (False, "the rule lets it through")


def test_allow_rule_reads_as_its_conditions() -> None:
    rule = allow_rule("send_email", "mailer", [("to", "equals", "a@b.c"), ("size", "at_most", 10)])
    assert rule == 'tool == "send_email" && agent == "mailer" && args["to"] == "a@b.c" && args["size"] <= 10'


# -- behind the service's back ---------------------------------------------------------------


def _named(store: Store, seq: int, text: str) -> None:
    report = verify_store(store)
    assert not report.ok and report.failure is not None
    assert (report.failure.seq, report.failure.rule) == (seq, "review rule 7"), str(report.failure)
    assert text in str(report.failure), str(report.failure)


def test_verify_names_an_approval_of_other_terms_than_proposed(
    mail: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    review = _opened(mail)
    made = mail.propose(mail.draft_proposal(review.id, conditions=[]), proposer=ALICE, signer=keys.alice)
    wider = {**made.policy, "review_when": "false", "proposal": made.id}  # never a person, for any send_*
    with Db(store_url) as db:
        forged = forge_append(db, "admin:root", "policy.set", wider, signer=keys.admin)
    _named(store, forged.seq, "expected the policy exactly as proposed")


def test_verify_names_a_proposal_by_someone_the_tool_is_not_for(
    mail: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    review = _opened(mail)
    draft = mail.draft_proposal(review.id, conditions=[])
    with Db(store_url) as db:  # Bob signs it himself and writes it behind the service's back
        forged = forge_append(db, BOB, "policy.proposed", draft, signer=keys.bob)
    _named(store, forged.seq, "own roles cover send_email")


def test_verify_names_the_approval_of_a_declined_proposal(
    mail: ReviewService, keys: Keys, store: Store, store_url: str
) -> None:
    review = _opened(mail)
    made = mail.propose(mail.draft_proposal(review.id, conditions=[]), proposer=ALICE, signer=keys.alice)
    mail.decline_proposal(made.id, reason="no", admin=keys.admin)
    with Db(store_url) as db:
        forged = forge_append(db, "admin:root", "policy.set", {**made.policy, "proposal": made.id}, signer=keys.admin)
    _named(store, forged.seq, "found it declined")


def test_incremental_verify_carries_proposals_across_a_checkpoint(
    mail: ReviewService, keys: Keys, store: Store, key_path: Path
) -> None:
    review = _opened(mail)
    made = mail.propose(mail.draft_proposal(review.id, conditions=[]), proposer=ALICE, signer=keys.alice)
    kept = store.checkpoint(key_path)
    mail.approve_proposal(made.id, admin=keys.admin)
    report = verify_store(store, against=kept, incremental=True)
    assert report.ok and report.checked_from == kept.size, report.failure


# -- the command line -----------------------------------------------------------------------


def test_audit_policy_proposals_approve_and_decline(
    mail: ReviewService, keys: Keys, store_url: str, key_path: Path
) -> None:
    admin = str(default_admin_key(key_path))
    first = mail.propose(mail.draft_proposal(_opened(mail).id, conditions=[]), proposer=ALICE, signer=keys.alice)
    second = mail.propose(
        mail.draft_proposal(_opened(mail, cid="p-cli").id, conditions=[("size", "at_most", 20)]),
        proposer=ALICE,
        signer=keys.alice,
    )
    listed = run_cli(store_url, None, "policy", "proposals")
    assert listed.returncode == 0 and first.id in listed.stdout and second.id in listed.stdout, listed.stderr
    assert "endsWith" not in listed.stdout and "a person reviews when (args.size > 10)" in listed.stdout
    done = run_cli(store_url, None, "policy", "approve", first.id, "--admin-key", admin)
    assert done.returncode == 0 and "in force from now on" in done.stdout, done.stderr
    no = run_cli(store_url, None, "policy", "decline", second.id, "--reason", "stale now", "--admin-key", admin)
    assert no.returncode == 0 and f"declined {second.id}" in no.stdout, no.stderr
    every = json.loads(run_cli(store_url, None, "policy", "proposals", "--all", "--json").stdout)
    states = {p["proposal"]: p["state"] for p in every}
    assert states[first.id] == "approved" and states[second.id] == "declined"
    again = run_cli(store_url, None, "policy", "approve", first.id, "--admin-key", admin)
    assert again.returncode == 2 and "found it approved" in again.stderr


def test_a_proposal_changes_the_rule_and_nothing_else(mail: ReviewService, keys: Keys, store_url: str) -> None:
    """What the admin signs is the policy in force with its rule widened by the allowing condition: a
    proposal that also loosens another term, or whose rule is not exactly that, is refused."""
    draft = mail.draft_proposal(_opened(mail).id, conditions=[("to", "equals", "bob@example.com")])
    before = snapshot(store_url)
    looser = {**draft, "policy": {**draft["policy"], "role": "teller"}}  # a role that is not the policy's
    with pytest.raises(ProposalRefused, match="policy mail's own terms with only its review_when rule changed"):
        mail.propose(looser, proposer=ALICE, signer=keys.alice)
    wider = {**draft, "policy": {**draft["policy"], "review_when": "false"}}  # never a person
    with pytest.raises(ProposalRefused, match="body.policy.review_when: expected"):
        mail.propose(wider, proposer=ALICE, signer=keys.alice)
    other_allow = {**draft, "allow": "true"}  # says it allows one thing, the rule another
    with pytest.raises(ProposalRefused, match="body.policy.review_when: expected"):
        mail.propose(other_allow, proposer=ALICE, signer=keys.alice)
    with pytest.raises(InvalidEntry, match="body.allow: expected a CEL expression"):
        mail.propose({**draft, "allow": "args.to ==="}, proposer=ALICE, signer=keys.alice)
    assert snapshot(store_url) == before
    assert mail.propose(draft, proposer=ALICE, signer=keys.alice).allow == draft["allow"]


def test_a_new_tools_proposal_holds_only_its_rule(svc: ReviewService, keys: Keys) -> None:
    review = svc.open_frontier([call("p-only", tool="lookup_x", args={"id": 1})], actor=AGENT).reviews[0]
    draft = svc.draft_proposal(review.id, conditions=[])
    extra = {**draft, "policy": {**draft["policy"], "self_approval": True}}
    with pytest.raises(ProposalRefused, match="nothing but a review_when rule"):
        svc.propose(extra, proposer=BOB, signer=keys.bob)
