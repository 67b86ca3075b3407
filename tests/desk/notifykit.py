"""Test kit for the notifier: a log with a reviewer, real receivers on 127.0.0.1 (a webhook server
that checks the HMAC with the README's snippet, a fake Slack endpoint, an aiosmtpd SMTP server),
and a helper that waits for something to become true."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import socket
import ssl
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from pathlib import Path
from typing import Any

from signoff.audit import CallSpec, Policy, ReviewService, Signer, open_store
from signoff.audit.keys import read_private_key
from signoff.audit.store import default_admin_key

ALICE = "human:alice@example.org"
SECRET = "whsec-test-0123456789"
_n = count()


def receiver_check() -> Callable[[str, str, bytes, int], bool]:
    """The receiver's check exactly as the module docstring (and the README) gives it."""
    import signoff.desk.notify as notify

    doc = notify.__doc__ or ""
    start = doc.index("A receiver checks it like this")
    block = doc[doc.index("::\n", start) + 3 : doc.index("\nAnswer 2xx", start)]
    namespace: dict[str, Any] = {}
    exec(textwrap.dedent(block), namespace)  # noqa: S102 - our own docstring, under test
    fn: Callable[[str, str, bytes, int], bool] = namespace["signoff_signature_ok"]
    return fn


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- a log ------------------------------------------------------------------------------------


@dataclass
class Log:
    url: str
    tmp: Path
    store: Any
    svc: ReviewService
    alice: Signer
    clock: Any = None  # the store's clock (an AheadClock unless the test gave its own)

    def open(
        self,
        tool: str = "transfer",
        args: dict[str, Any] | None = None,
        *,
        role: str | None = "finance",
        deadline: float | None = 3600,
        agent: str = "teller",
    ) -> str:
        i = next(_n)
        spec = CallSpec(
            app="bank",
            user="u1",
            session=f"s{i}",
            invocation=f"inv{i}",
            confirmation_id=f"conf{i}",
            call_id=f"call{i}",
            tool=tool,
            args=args if args is not None else {"amount": 100 + i, "to": "acct-1"},
            agent=agent,
        )
        front = self.svc.open_frontier(
            [spec], actor="agent:teller", policies=[Policy(role=role, deadline_seconds=deadline)]
        )
        return front.reviews[0].id

    def approve(self, review: str) -> None:
        self.svc.approve(review, reviewer=ALICE, signer=self.alice)

    def reject(self, review: str, reason: str = "not this month") -> None:
        self.svc.reject(review, reviewer=ALICE, reason=reason, signer=self.alice)

    def close(self) -> None:
        self.store.close()


class AheadClock:
    """The real UTC time plus an offset a test moves forward: the store's clock, so that expiry and
    escalation happen by the log's own time (an entry's ``at`` is what ``audit verify`` checks)."""

    def __init__(self) -> None:
        self.offset = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += dt.timedelta(seconds=seconds)


def make_log(url: str, tmp: Path, clock: Callable[[], dt.datetime] | None = None, *, sealed: bool | None = None) -> Log:
    """``sealed``: the log keeps the values beside it (as ``audit init`` does without
    ``--values-in-entries``); by default, as ``audit init`` makes a log."""
    clock = clock or AheadClock()
    store = open_store(url, clock=clock)
    if sealed is None:
        store.init_log(tmp / "log.key")
    else:
        store.init_log(tmp / "log.key", sealed_values=sealed)
    admin = read_private_key(default_admin_key(tmp / "log.key"))
    svc = ReviewService(store)
    alice = Signer.generate()
    svc.enroll_reviewer(ALICE, roles=["finance", "ops"], tools=["*"], key=alice.public, admin=admin)
    return Log(url, tmp, store, svc, alice, clock)


# -- an HTTP receiver ---------------------------------------------------------------------------


@dataclass
class Request:
    at: float  # time.monotonic() when it arrived
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def event_id(self) -> str:
        return self.headers.get("signoff-event-id", "")


@dataclass
class Receiver:
    """A webhook (or Slack) receiver on 127.0.0.1. It answers 401 to a bad signature, ``fail`` to the
    first ``fail_first`` requests, and 2xx otherwise (after ``delay`` seconds)."""

    secret: str | None = SECRET
    tolerance: int = 300
    fail_first: int = 0
    fail: int = 503
    delay: float = 0.0
    slack: bool = False
    retry_after: str | None = None
    requests: list[Request] = field(default_factory=list)
    active: int = 0  # requests being answered (with a delay) right now
    check: Callable[[str, str, bytes, int], bool] = field(default_factory=receiver_check)

    def __post_init__(self) -> None:
        receiver = self
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, text = receiver.answer(dict(self.headers.items()), body)
                if receiver.delay:
                    with receiver._lock:
                        receiver.active += 1
                    time.sleep(receiver.delay)
                    with receiver._lock:
                        receiver.active -= 1
                with receiver._lock:
                    receiver.requests.append(
                        Request(
                            time.monotonic(), self.path, {k.lower(): v for k, v in self.headers.items()}, body, status
                        )
                    )
                data = text.encode()
                self.send_response(status)
                if status in (429, 503) and receiver.retry_after is not None:
                    self.send_header("Retry-After", receiver.retry_after)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the notifier may be killed mid-request
                    self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client killed mid-request (the crash test) is expected here

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hook"

    def answer(self, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        lower = {k.lower(): v for k, v in headers.items()}
        if self.slack:
            problem = slack_problem(json.loads(body))
            if problem:
                return 400, f"invalid_blocks: {problem}"
        elif self.secret is not None and not self.check(
            self.secret, lower.get("signoff-signature", ""), body, self.tolerance
        ):
            return 401, "bad signature"
        with self._lock:
            served = sum(1 for r in self.requests if r.status != 401)
        if served < self.fail_first:
            return self.fail, "try later"
        return 200, "ok"

    def ok(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if 200 <= r.status < 300]

    def ids(self) -> list[str]:
        return [r.json["id"] for r in self.ok()]

    def wait_for(self, n: int, timeout: float = 10.0) -> list[Request]:
        wait_until(lambda: len(self.ok()) >= n, timeout, f"{n} deliveries (have {len(self.ok())})")
        return self.ok()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def slack_problem(message: Any, *, need_button: bool = True) -> str:
    """What is wrong with an incoming-webhook message, as Slack's Block Kit would see it ("" if nothing);
    ``need_button``: ours must carry the button that opens the review (a decided one's need not)."""
    if not isinstance(message, dict) or not isinstance(message.get("text"), str) or not message["text"]:
        return "text: expected a non-empty string (the notification fallback)"
    blocks = message.get("blocks")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= 50:
        return "blocks: expected a list of 1 to 50 blocks"
    buttons = 0
    for i, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "section":
            text = block.get("text") or {}
            if text.get("type") not in ("mrkdwn", "plain_text") or not 0 < len(text.get("text", "")) <= 3000:
                return f"blocks[{i}].text: expected mrkdwn or plain_text of 1-3000 characters"
        elif kind == "context":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 10:
                return f"blocks[{i}].elements: expected 1-10 elements"
        elif kind == "actions":
            for element in block.get("elements") or []:
                if element.get("type") != "button":
                    return f"blocks[{i}]: expected buttons"
                label = element.get("text") or {}
                if label.get("type") != "plain_text" or not 0 < len(label.get("text", "")) <= 75:
                    return f"blocks[{i}] button text: expected plain_text of 1-75 characters"
                url = element.get("url", "")
                if not url.startswith(("http://", "https://")) or len(url) > 3000:
                    return f"blocks[{i}] button url: expected an http(s) URL, found {url[:60]!r}"
                buttons += 1
        else:
            return f"blocks[{i}].type: expected section, context or actions, found {kind!r}"
    return "" if buttons or not need_button else "blocks: expected a button that opens the review"


# -- an SMTP server ------------------------------------------------------------------------------


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA: (certificate file, key file)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "signoff test smtp")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "smtp.crt", tmp / "smtp.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class Smtp:
    """An aiosmtpd server on 127.0.0.1: ``tls`` is none, starttls (required, with AUTH) or tls (implicit)."""

    def __init__(
        self, tmp: Path, tls: str = "none", user: str = "notifier", password: str = "mail-pw", *, delay: float = 0.0
    ) -> None:
        """``delay``: seconds between taking a message and answering 250 (a sender killed meanwhile sent it,
        unconfirmed)."""
        import asyncio

        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult, LoginPassword

        self.messages: list[Any] = []
        self.logins: list[str] = []
        self.port = free_port()
        self.cafile: Path | None = None
        outer = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
                outer.messages.append(envelope)
                if delay:
                    await asyncio.sleep(delay)
                return "250 OK"

        def authenticator(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
            ok = isinstance(data, LoginPassword) and data.login.decode() == user and data.password.decode() == password
            if ok:
                outer.logins.append(data.login.decode())
            return AuthResult(success=ok, handled=False)

        kwargs: dict[str, Any] = {}
        if tls != "none":
            cert, key = self_signed(tmp)
            self.cafile = cert
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
            if tls == "starttls":
                kwargs.update(
                    tls_context=context, require_starttls=True, authenticator=authenticator, auth_require_tls=True
                )
            else:
                kwargs.update(ssl_context=context, authenticator=authenticator, auth_require_tls=False)
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port, **kwargs)
        self.controller.start()

    def wait_for(self, n: int, timeout: float = 10.0) -> list[Any]:
        wait_until(lambda: len(self.messages) >= n, timeout, f"{n} e-mails")
        return self.messages

    def close(self) -> None:
        self.controller.stop()
