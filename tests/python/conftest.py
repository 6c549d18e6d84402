"""Fixtures shared by every Python test folder (helpers: support.py beside this file, on the
path through pytest.ini's pythonpath)."""

from support import gen, rng  # noqa: F401  (the fixtures)
