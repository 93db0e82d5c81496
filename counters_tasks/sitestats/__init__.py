"""Site PV/UV (being split by table: issue 41)."""

from .site_day import *  # noqa: F403
