"""Canonical contract: exact-shape commands, records, results, limits, invariants and errors.

Dependency direction: contract <- local, contract <- service, contract <- cli, and
contract <- cluster_postgres; the contract imports none of them. Nothing here opens a database,
reads a clock, starts a timer or a process, and nothing here imports apsw, so a Cluster
Profile adapter can implement the same contract on another store.

Every Struct here is declared ``gc=False``: its instances hold only scalars, strings, enum members,
other contract Structs and JSON-shaped lists/dicts, so they can never be part of a reference cycle,
and keeping them out of the cyclic garbage collector matters on the hot path (the repositories
build several per operation; collection pressure alone cost ~10% of throughput in ``make bench``).
Never store a Struct inside a container that it (directly or indirectly) references.
"""
