"""Helpers shared by the tests, the conformance suite, the cluster tests and the benchmarks.

Every module here is imported one way, ``from tests.support.<module> import name`` (or, for a module
used as a namespace of campaign counters, ``from tests.support import fault_stats``);
tests/unit/test_test_layout.py keeps it so. Nothing here is collected by pytest: the test modules
(``test_*.py``) and their fixtures (``conftest.py``) are the only other Python files under tests/<kind>/
(unit, property, conformance, fault, e2e, panel, artifact) and cluster/tests/; tests/bench/ holds the
benchmark scripts and their own helpers. Two modules are also run as scripts in a fresh interpreter, by path: runtime_probe.py
(the artifact tests) and fault_serve.py (the fault campaigns).
"""
