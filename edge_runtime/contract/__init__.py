"""Canonical contract: exact-shape commands, records, results, limits, invariants and errors.

Dependency direction: contract <- local <- service <- cli. Nothing here opens a database,
reads a clock, starts a timer or a process, and nothing here imports apsw, so a Cluster
Profile adapter can implement the same contract on another store.
"""
