"""Prefect flows and the ``flywheel`` CLI: a thin layer over tasks/ and verifiers/."""

__version__ = "0.1.0"
