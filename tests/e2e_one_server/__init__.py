"""End-to-end modules that share one server of the bundled model (see conftest.py)."""
