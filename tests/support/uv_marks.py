"""How a UV is expected to be shown (issue 42), written apart from the code that shows it so the
tests of the CLI and the dashboard check it rather than repeat it: an estimate ``≈N ±X%``, X its
relative standard error (the JSON's ``uv_error``) in percent with one decimal; an exact figure plain."""

from __future__ import annotations


def bound(error: float) -> str:
    """An estimate's bound as printed: ``±0.8%`` for 0.0081."""
    return f"±{error * 100:.1f}%"


def shown_uv(figure: dict) -> str:
    """The text of a JSON figure's UV (``uv``, ``uv_exact``, ``uv_error``) in a table or on the page."""
    return str(figure["uv"]) if figure["uv_exact"] else f"≈{figure['uv']} {bound(figure['uv_error'])}"
