"""The package's exceptions."""

from __future__ import annotations


class CountersError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidInput(CountersError, ValueError):
    """Bad input: raised before anything is written, and never retried by the tasks."""


class ConfigurationError(CountersError):
    """A setting (environment variable) is missing or malformed."""
