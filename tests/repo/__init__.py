"""Checks of the repository itself: architecture, imports, packaging, README, guides, Makefile, deployment files, benchmarks."""
