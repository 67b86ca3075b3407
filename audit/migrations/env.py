"""Alembic's environment for Signoff: always run with a connection handed in by
:func:`signoff.audit.schema_version.upgrade` (there is no alembic.ini and no URL here)."""

from __future__ import annotations

from alembic import context

from signoff.audit.schema_version import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
