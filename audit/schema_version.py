"""The store's schema version, and upgrading it with Alembic (``audit migrate``).

* A new store is created at the head revision and stamped in the same transaction.
* Opening a store checks its revision first: an older store is refused with the command that
  upgrades it, a newer one (made by a later Signoff) is refused outright. Nothing is written.
* A store made by signoff 0.1.0 has no version table; it is at the baseline revision, 0001.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect

from signoff.audit.errors import StoreError

VERSION_TABLE = "signoff_schema_version"
BASELINE = "0001"
_SCRIPTS = Path(__file__).resolve().parent / "migrations"


class SchemaOutdated(StoreError):
    """The store's schema is older than this code's: ``audit migrate`` upgrades it."""


class SchemaTooNew(StoreError):
    """The store was made or upgraded by a newer Signoff than this one."""


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision this code knows."""
    found = ScriptDirectory.from_config(_config()).get_current_head()
    assert found is not None
    return found


def current(conn: Connection) -> str | None:
    """The store's revision: from the version table, the baseline for a 0.1.0 store, None if empty."""
    names = set(inspect(conn).get_table_names())
    if VERSION_TABLE in names:
        # Alembic's own table (one row, ``version_num``), read directly: MigrationContext logs at INFO.
        rows = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").fetchall()
        return str(rows[0][0]) if rows else None
    return BASELINE if "signoff_entry" in names else None


def check(conn: Connection, where: str) -> None:
    """Refuse a store whose schema is not this code's head (see the module docstring)."""
    found, wanted = current(conn), head()
    if found is None or found == wanted:
        return
    known = {rev.revision for rev in ScriptDirectory.from_config(_config()).walk_revisions()}
    if found not in known:
        raise SchemaTooNew(
            f"store {where}: expected schema revision {wanted} or older, found {found}, made by a newer Signoff; "
            "upgrade Signoff to open it"
        )
    raise SchemaOutdated(
        f"store {where}: expected schema revision {wanted}, found {found} (an older Signoff's); "
        f"back it up, then run `audit --store {where} migrate`"
    )


def stamp_head(conn: Connection) -> None:
    """Mark a store just created at the head (in its creating transaction)."""
    command.stamp(_config(conn), "head")


def upgrade(conn: Connection) -> tuple[str | None, str]:
    """Upgrade the store to the head in one transaction; returns (revision before, revision after)."""
    before = current(conn)
    if before is None:
        raise StoreError("store: expected a Signoff store to upgrade, found an empty database (run `audit init`)")
    if before == BASELINE and VERSION_TABLE not in inspect(conn).get_table_names():
        command.stamp(_config(conn), BASELINE)
    command.upgrade(_config(conn), "head")
    return before, head()
