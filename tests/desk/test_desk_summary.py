"""The plain-words summary (desk/summary.py) and the edit form's fields (desk/forms.py): pure functions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from signoff.desk import forms
from signoff.desk.summary import (
    Part,
    cut,
    excerpts,
    money,
    number,
    of_review,
    own_question,
    question_parts,
    runs_with,
    summarize,
)

IBAN = "DE89 3704 0044 0532 0130 00"
ADK_HINT = (
    "Please approve or reject the tool call transfer_money() by responding with a FunctionResponse with an "
    "expected ToolConfirmation payload."
)


def test_the_issue_example() -> None:
    s = summarize(
        "transfer_money",
        {"amount": 1250.0, "currency": "EUR", "to_account": IBAN, "memo": "Invoice 1042"},
        agent="back_office",
        description="Transfer money from the company account to another account.\n\nArgs: …",
        hint=ADK_HINT,
    )
    assert s.headline == f"back_office wants to transfer_money: 1,250.00 EUR to {IBAN} (memo: Invoice 1042)"
    assert s.lead == f"1,250.00 EUR to {IBAN}"
    assert s.purpose == "Transfer money from the company account to another account."
    assert s.question == ""  # ADK's protocol text is never shown
    assert [(a.name, a.text) for a in s.key_args] == [
        ("amount", "1,250.00 EUR"),
        ("to_account", IBAN),
        ("memo", "Invoice 1042"),
    ]
    assert [a.name for a in s.other_args] == ["memo"] and s.more == 0


def test_a_large_and_a_small_amount_read_differently() -> None:
    big = summarize("transfer_money", {"amount": 99999, "currency": "eur", "to_account": "X"}, agent="a")
    small = summarize("transfer_money", {"amount": 89.9, "currency": "EUR", "to_account": "X"}, agent="a")
    assert big.lead == "99,999.00 EUR to X" and small.lead == "89.90 EUR to X"


@pytest.mark.parametrize(
    ("args", "lead"),
    [
        ({"price_usd": 12.5}, "12.50 USD"),
        ({"total": 3, "currency_code": "JPY"}, "3 JPY"),
        ({"fee": 1234567}, "1,234,567"),
        ({"limit": 2.5}, "2.5"),
        ({"amount": True}, ""),  # a boolean is not an amount
        ({"amount": 5, "currency": "euros"}, "5"),  # not an ISO 4217 code: no currency
    ],
)
def test_amounts(args: dict[str, object], lead: str) -> None:
    assert summarize("pay", args).lead == lead


def test_recipient_and_the_rest() -> None:
    s = summarize(
        "send_email",
        {
            "to": "dana@example.com",
            "subject": "Q3 numbers are final",
            "body": "Hi Dana,\n\nthe Q3 numbers…" + "x" * 300,
        },
        agent="back_office",
        schema={"type": "object", "properties": {}, "required": ["to", "subject", "body"]},
    )
    assert s.headline.startswith(
        "back_office wants to send_email: to dana@example.com (subject: Q3 numbers are final, "
    )
    assert "body: Hi Dana, the Q3" in s.headline and "\n" not in s.headline and len(s.headline) <= 220
    assert [a.name for a in s.other_args] == ["subject", "body"]


def test_no_amount_no_recipient_names_the_arguments() -> None:
    s = summarize("delete_record", {"table": "customers", "record_id": "7781"}, agent="back_office")
    assert s.headline == "back_office wants to delete_record: table: customers, record_id: 7781"
    assert s.lead == "" and [a.name for a in s.other_args] == ["table", "record_id"]
    assert summarize("noop", {}).headline == "The agent wants to noop"


def test_values_of_every_kind() -> None:
    s = summarize(
        "x",
        {"items": [1, 2, 3, 4, 5], "cfg": {"a": 1, "b": [1, 2]}, "flag": False, "n": None, "e": ""},
        agent="a",
    )
    assert s.headline == "a wants to x: items: [1, 2, 3, +2 more], cfg: {a: 1, b: [1, 2]}, flag: no, +2 more"
    assert [a.text for a in s.key_args] == ["1, 2, 3, +2 more", "{a: 1, b: [1, 2]}", "no", "none"]
    assert s.more == 1


def test_long_values_are_cut_everywhere() -> None:
    s = summarize("t", {"to": "y" * 5000, "note": "z" * 5000}, agent="a" * 10)
    assert len(s.headline) <= 220 and s.headline.endswith("…)") or s.headline.endswith("…")
    assert all(len(a.text) <= 80 and len(a.full) <= 300 for a in s.key_args)


def test_the_tools_own_question_is_shown() -> None:
    assert (
        own_question("Which daily limit should account ACC-204 get?") == "Which daily limit should account ACC-204 get?"
    )
    for protocol in (
        ADK_HINT,
        "Please approve or reject the tool call wf_tool().",
        "This tool call requires confirmation, please approve or reject.",
        "Signoff: a person must approve transfer_money() before it runs.",
        "  ",
    ):
        assert own_question(protocol) == ""


def test_helpers() -> None:
    assert number(1250.0) == "1,250" and number(0.1) == "0.1" and number(-3) == "-3"
    assert money(1250, "EUR") == "1,250.00 EUR" and money(1250, "JPY") == "1,250 JPY"
    assert cut("a  b\n\nc", 10) == "a b c" and cut("word " * 20, 16).endswith("…")


# -- after a reviewer's change: what will run, the proposal struck beside it (issue 13) ----------------

PROPOSED = {"amount": 100.0, "currency": "EUR", "to_account": "DE89", "memo": "Invoice 1042"}


def test_an_edited_call_reads_as_what_runs_with_the_proposal_beside_each_changed_phrase() -> None:
    final = {**PROPOSED, "amount": 50}
    s = summarize("transfer_money", final, agent="back_office", proposed=PROPOSED)
    assert s.headline == "back_office wants to transfer_money: 50.00 EUR to DE89 (memo: Invoice 1042)"
    assert s.lead == "50.00 EUR to DE89" and s.changed and s.lead_changed
    assert s.lead_parts == (
        Part("50.00 EUR", "100.00 EUR", ("amount", "currency")),
        Part("to DE89", "", ("to_account",)),
    )
    assert [p.changed for p in s.extra_parts] == [False]
    assert [(k.name, k.was) for k in s.key_args] == [("amount", "100.00 EUR"), ("to_account", ""), ("memo", "")]
    assert s.to_json()["lead_parts"] == [{"text": "50.00 EUR", "was": "100.00 EUR"}, {"text": "to DE89", "was": ""}]
    # The same args as proposed (1250 is 1250.0 in RFC 8785) are no change; without ``proposed``, none either.
    assert not summarize("transfer_money", {**PROPOSED, "amount": 100}, proposed=PROPOSED).changed
    assert not summarize("transfer_money", final).changed


def test_a_changed_currency_recipient_or_other_argument_is_marked_and_a_removed_one_struck() -> None:
    final = {"amount": 100.0, "currency": "USD", "to_account": "FR76", "note": "new"}
    s = summarize("transfer_money", final, agent="a", proposed=PROPOSED)
    assert [(p.text, p.was) for p in s.lead_parts] == [("100.00 USD", "100.00 EUR"), ("to FR76", "to DE89")]
    # memo was removed (a part with no text: nothing of it runs); note was added.
    assert [(p.text, p.was) for p in s.extra_parts] == [("", "memo: Invoice 1042"), ("note: new", "(not set)")]
    assert s.headline == "a wants to transfer_money: 100.00 USD to FR76 (note: new)"
    # A changed argument is named in the parentheses before the unchanged ones.
    many = {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}
    s = summarize("t", {**many, "e": 6}, proposed=many)
    assert s.extra_parts[0] == Part("e: 6", "e: 5", ("e",)) and s.extra_more == 2


def test_a_changed_long_text_is_shown_from_where_it_changed() -> None:
    before = "Hi Dana,\n\nthe Q3 numbers are final and in the shared folder.\n\nBest"
    after = "Hi Dana,\n\nthe Q3 numbers are final; they are in Finance › Reports › Q3.\n\nBest,\nSam"
    s = summarize("send_email", {"to": "d@x.org", "body": after}, proposed={"to": "d@x.org", "body": before})
    [body] = [p for p in s.extra_parts if p.changed]
    assert body.was == "body: …numbers are final and in the shared…"
    assert body.text == "body: …numbers are final; they are in…"
    assert excerpts("short", "other", 40) == ("short", "other")


def test_the_tools_question_marks_the_proposed_values_it_quotes() -> None:
    final = {**PROPOSED, "amount": 50, "to_account": "FR76"}
    hint = "Send 100.00 EUR (or 100 EUR) to DE89? Not 1100 or 100.5."
    parts = question_parts(hint, PROPOSED, final)
    assert "".join(p.text for p in parts) == "Send 50.00 EUR (or 50 EUR) to FR76? Not 1100 or 100.5."
    assert [(p.was, p.text) for p in parts if p.changed] == [("100.00", "50.00"), ("100", "50"), ("DE89", "FR76")]
    big = question_parts("Pay 1,250.00 EUR?", {"amount": 1250.0}, {"amount": 12500})
    assert [(p.was, p.text) for p in big if p.changed] == [("1,250.00", "12,500.00")]
    assert question_parts("Pay it?", PROPOSED, final) == (Part("Pay it?"),)  # nothing quoted: unmarked
    s = summarize("transfer_money", final, hint=hint, proposed=PROPOSED)
    assert s.question == hint and s.question_parts == parts  # the question itself stays the tool's words


def test_what_runs_is_a_pending_rounds_args_or_an_edits() -> None:
    call = SimpleNamespace(tool="transfer_money", args=PROPOSED, agent="a", hint="", tool_schema=None)
    pending = SimpleNamespace(status="pending", round=1, round_args={**PROPOSED, "amount": 7}, call=call)
    assert runs_with(pending) == {**PROPOSED, "amount": 7} and of_review(pending).lead == "7.00 EUR to DE89"
    assert runs_with(SimpleNamespace(status="pending", round=0, round_args=PROPOSED, call=call)) is None
    edited = SimpleNamespace(status="edited", final_args={**PROPOSED, "amount": 9}, call=call)
    assert of_review(edited).lead_parts[0] == Part("9.00 EUR", "100.00 EUR", ("amount", "currency"))
    approved = SimpleNamespace(status="approved", final_args=PROPOSED, call=call)
    assert runs_with(approved) is None and not of_review(approved).changed


# -- the edit form --------------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "number"},
        "count": {"type": "integer"},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "urgent": {"type": "boolean"},
        "notify": {"type": "boolean"},
        "reference": {"type": "string", "description": "for the statement"},
        "body": {"type": "string"},
        "tags": {"type": "array"},
        "maybe": {"type": ["string", "null"]},
    },
    "required": ["amount", "currency", "urgent"],
}


def test_a_field_per_parameter_with_its_widget() -> None:
    args = {
        "amount": 12.5,
        "currency": "EUR",
        "urgent": True,
        "count": 3,
        "reference": "hi",
        "tags": ["a"],
        "x": {"k": 1},
    }
    got = {f.name: f for f in forms.arg_fields(SCHEMA, args)}
    assert [f.name for f in forms.arg_fields(SCHEMA, args)][:3] == ["amount", "currency", "urgent"]  # required first
    assert got["amount"].widget == "number" and got["amount"].value == "12.5"
    assert got["count"].widget == "integer" and got["count"].value == "3"
    assert got["currency"].widget == "select" and [o.value for o in got["currency"].options] == ['"EUR"', '"USD"']
    assert got["currency"].value == '"EUR"'
    assert got["urgent"].widget == "checkbox" and got["urgent"].checked
    assert got["notify"].widget == "select" and not got["notify"].present  # optional and left out: "not set"
    assert got["reference"].widget == "text" and got["reference"].description == "for the statement"
    assert got["body"].widget == "textarea" and got["body"].value == ""  # named like a text body
    assert got["tags"].widget == "json" and got["x"].widget == "json" and got["x"].present
    assert got["maybe"].widget == "text" and not got["maybe"].present


def test_long_or_multiline_strings_get_a_text_area() -> None:
    got = forms.arg_fields(None, {"a": "short", "b": "x" * 61, "c": "two\nlines", "d": "cr\rlf"})
    assert [f.widget for f in got] == ["text", "textarea", "textarea", "textarea"]


def test_a_value_that_does_not_fit_its_type_is_edited_as_json() -> None:
    got = forms.arg_fields({"properties": {"n": {"type": "number"}}}, {"n": "twelve"})
    assert got[0].widget == "json" and got[0].value == '"twelve"'


def test_payload_form_only_when_flat() -> None:
    assert [f.widget for f in forms.payload_fields({"limit": 500, "currency": "EUR", "ok": True})] == [
        "integer",
        "text",
        "checkbox",
    ]
    assert forms.payload_fields({"limit": {"daily": 5}}) == [] and forms.payload_fields([1]) == []
    assert forms.payload_fields(None) == [] and forms.payload_fields({}) == []
