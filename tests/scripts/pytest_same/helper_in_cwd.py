"""Importable from the tests only where the directory pytest was started in is on sys.path
(`python -m pytest` without -P puts it first; the `pytest` script does not; pytest itself puts
the directories of the tests and their conftest, `tests/`, there)."""
