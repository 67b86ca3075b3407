"""The desk's full rule check, run in a child process (``python -m signoff.desk.verify_child``).

A full ``audit verify`` holds the state of every open review while it reads the log (about 6 KB each:
600 MB at 100,000 pending) and keeps a core busy for as long as it reads. In a child process that
memory is returned when the check ends, and the desk's own threads keep the GIL for its pages
(issue 24 §5). The store's URL and log id come on stdin as JSON (a URL may hold a password, which
the command line would show to every user of the host); the report goes to stdout as JSON.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from signoff.audit import open_store
    from signoff.audit.verify import verify_store

    asked = json.loads(sys.stdin.read())
    store = open_store(asked["url"], create=False, log=asked["log"])
    try:
        report = verify_store(store)
    finally:
        store.close()
    failure = str(report.failure) if report.failure is not None else None
    print(json.dumps({"ok": report.ok, "size": report.size, "checked_from": report.checked_from, "failure": failure}))


if __name__ == "__main__":
    main()
