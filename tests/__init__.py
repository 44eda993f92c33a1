"""The test suite (a package, so ``tests`` always means this directory: its helpers are reached as
``tests.support.<module>`` and nothing else; pytest puts the repository root on the path, see
``pythonpath`` in pyproject.toml)."""
