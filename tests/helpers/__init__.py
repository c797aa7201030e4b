"""Helpers shared by the tests and benchmarks (not part of the ``dynamix`` package, which never imports them).

Tests import them as ``from helpers.engine import ...``: pytest puts ``tests/`` on ``sys.path`` (the
test files are rootdir-relative modules, no ``tests/__init__.py``); benchmarks insert it themselves.
"""
