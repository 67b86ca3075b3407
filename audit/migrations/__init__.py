"""Alembic migrations of the store's schema (the log, its projections and checkpoints).

Migrations change tables and indexes, and rebuild projections from the log where needed; they
never rewrite a log entry (``signoff_entry``'s bytes and hashes). The revision a store is at is
kept in ``signoff_schema_version`` (Alembic's version table under Signoff's own name, so that it
never meets an application's own Alembic history in a shared database).
"""
