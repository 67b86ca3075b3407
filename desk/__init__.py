"""Signoff desk: the web page and JSON API where people decide paused tool calls.

Public surface: :func:`create_app` (the FastAPI app factory) and :func:`main` (the
``desk`` console command). Everything else is internal to the package.
"""

from signoff.desk.app import create_app
from signoff.desk.cli import main

__all__ = ["create_app", "main"]
