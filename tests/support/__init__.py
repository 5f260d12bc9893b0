"""Helpers the tests share that are more than fixtures (see tests/support/published.py)."""
