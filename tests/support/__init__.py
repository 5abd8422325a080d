"""Fixture plugins for the whole tests/ tree (registered in tests/conftest.py)."""
