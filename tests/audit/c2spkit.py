"""Helpers for the C2SP tests: deterministic keys, a small log, reference RFC 6962 verifiers written
straight from RFC 6962 §2.1 (not the project's), a witness subprocess and a static HTTP server."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from signoff.audit.cli_witness import load_cosigner
from signoff.audit.cli_witness import main as witness_main
from signoff.audit.merkle import leaf_hash, root_from_leaves
from signoff.audit.signed_note import Ed25519Signer
from signoff.audit.tlog_checkpoint import Checkpoint, sign_checkpoint
from signoff.audit.tlog_cosignature import CosignatureVerifier, Cosigner

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
LOG_ORIGIN = "example.com/signoff-test-log"


def private_key(seed: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode()).digest())


def log_signer(name: str = LOG_ORIGIN, seed: str = "log") -> Ed25519Signer:
    return Ed25519Signer(name, private_key(f"{seed}:{name}"))


def cosigner(name: str = "witness.example.org/w1", seed: str = "witness", now: float = 1_700_000_000) -> Cosigner:
    return Cosigner(name, private_key(f"{seed}:{name}"), clock=lambda: now)


def entry(i: int) -> bytes:
    return f"entry {i}".encode()


@functools.lru_cache(maxsize=8)
def leaf_hashes(n: int) -> tuple[bytes, ...]:
    return tuple(leaf_hash(entry(i)) for i in range(n))


def signed_checkpoint(size: int, signer: Ed25519Signer | None = None, origin: str = LOG_ORIGIN) -> bytes:
    signer = signer or log_signer(origin)
    return sign_checkpoint(Checkpoint(origin, size, root_from_leaves(leaf_hashes(size))), [signer])


class MemorySource:
    """A TileSource over ``entries`` in memory."""

    def __init__(self, entries: Sequence[bytes]) -> None:
        self._entries = list(entries)
        self._hashes = [leaf_hash(e) for e in self._entries]

    @property
    def size(self) -> int:
        return len(self._entries)

    def leaf_hashes(self, start: int, end: int) -> Iterable[bytes]:
        return iter(self._hashes[start:end])

    def entries(self, start: int, end: int) -> Iterable[bytes]:
        return iter(self._entries[start:end])


class GeneratedSource:
    """A TileSource of ``size`` entries made on the fly (``entry(i)``): nothing held in memory."""

    def __init__(self, size: int) -> None:
        self.size = size

    def leaf_hashes(self, start: int, end: int) -> Iterator[bytes]:
        return (leaf_hash(entry(i)) for i in range(start, end))

    def entries(self, start: int, end: int) -> Iterator[bytes]:
        return (entry(i) for i in range(start, end))


# -- RFC 6962 §2.1, recursively, as the RFC writes it -------------------------------------------


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return _h(b"\x01" + left + right)


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def rfc6962_root_from_path(m: int, n: int, leaf: bytes, path: Sequence[bytes]) -> bytes:
    """The root PATH(m, D[n]) gives for leaf ``m``: ``PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n])``
    for m < k, else ``PATH(m - k, D[k:n]) : MTH(D[0:k])`` (RFC 6962 §2.1.1); the last element is the
    top sibling."""
    if n == 1:
        if path:
            raise ValueError("inclusion path too long")
        return leaf
    if not path:
        raise ValueError("inclusion path too short")
    k = _k(n)
    *rest, top = path
    if m < k:
        return _node(rfc6962_root_from_path(m, k, leaf, rest), top)
    return _node(top, rfc6962_root_from_path(m - k, n - k, leaf, rest))


def rfc6962_verify_inclusion(leaf: bytes, index: int, size: int, path: Sequence[bytes], root: bytes) -> bool:
    try:
        return 0 <= index < size and rfc6962_root_from_path(index, size, leaf, list(path)) == root
    except ValueError:
        return False


def _subproof(m: int, n: int, b: bool, proof: list[bytes], old_root: bytes) -> tuple[bytes, bytes]:
    """(MTH of the old part, MTH of the whole) of the subtree SUBPROOF(m, D[n], b) covers (RFC 6962 §2.1.2)."""
    if m == n:
        if b:  # SUBPROOF(m, D[m], true) = {}: the old tree itself
            if proof:
                raise ValueError("consistency proof too long")
            return old_root, old_root
        if len(proof) != 1:  # SUBPROOF(m, D[m], false) = {MTH(D[m])}
            raise ValueError("consistency proof has the wrong length")
        return proof[0], proof[0]
    if not proof:
        raise ValueError("consistency proof too short")
    k = _k(n)
    *rest, last = proof
    if m <= k:  # SUBPROOF(m, D[0:k], b) : MTH(D[k:n])
        old, new = _subproof(m, k, b, rest, old_root)
        return old, _node(new, last)
    old, new = _subproof(m - k, n - k, False, rest, old_root)  # SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])
    return _node(last, old), _node(last, new)


def rfc6962_verify_consistency(m: int, n: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    if not 0 < m <= n:
        return False
    try:
        return _subproof(m, n, True, list(proof), old_root) == (old_root, new_root)
    except ValueError:
        return False


# -- processes and servers -----------------------------------------------------------------------


class WitnessProcess:
    """``python -m signoff.audit.cli_witness serve …`` on 127.0.0.1, a free port picked by the server."""

    def __init__(self, key: Path, store: str, logs: Sequence[str], log_file: Path) -> None:
        argv = [PYTHON, "-m", "signoff.audit.cli_witness", "serve", "--key", str(key), "--store", store, "--port", "0"]
        for vkey in logs:
            argv += ["--log", vkey]
        self.log_file = log_file
        self._err = open(log_file, "wb")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=self._err, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if not match:
            self.stop()
            raise RuntimeError(f"witness did not start: {line!r} {log_file.read_text()}")
        self.url = match.group(1)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self._err.close()
        return self.proc.returncode


@contextmanager
def static_server(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 in a thread; yields the URL prefix."""

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(directory), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def serve_in_thread(server: ThreadingHTTPServer) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.05)


# -- a log's witnesses ----------------------------------------------------------------------------

NAMES = ("witness.example.org/w1", "witness.example.org/w2", "witness.example.org/w3")


class Witnesses:
    """Three witnesses, each a real process with its own key and its own SQLite state."""

    def __init__(self, root: Path, log_vkey_text: str) -> None:
        self.root = root
        self.log_vkey = log_vkey_text
        self.keys: dict[str, Path] = {}
        self.procs: dict[str, WitnessProcess] = {}
        for i, name in enumerate(NAMES):
            key = root / f"w{i}.pem"
            assert witness_main(["keygen", "--name", name, "--out", str(key)]) == 0
            self.keys[name] = key
            self.start(name)

    def start(self, name: str) -> WitnessProcess:
        i = NAMES.index(name)
        proc = WitnessProcess(
            self.keys[name], f"sqlite:///{self.root / f'w{i}.db'}", [self.log_vkey], self.root / f"w{i}.log"
        )
        self.procs[name] = proc
        return proc

    def stop(self, name: str) -> None:
        self.procs[name].stop()

    def vkey(self, name: str) -> str:
        return load_cosigner(self.keys[name]).vkey()

    def verifiers(self, *names: str) -> list[CosignatureVerifier]:
        return [CosignatureVerifier.from_vkey(self.vkey(n)) for n in (names or NAMES)]

    def close(self) -> None:
        for proc in self.procs.values():
            proc.stop()
