"""QingLong Cluster Profile on PostgreSQL (docs/cluster.md).

Dependency direction: cluster_postgres -> edge_runtime.contract (the contract it implements),
edge_runtime.service (the ports and the device service it runs) and edge_runtime.cli (the user
commands it composes with its store); never edge_runtime.local nor apsw, and edge_runtime never
imports it.

Exports only ``__version__``: import each thing from the module that owns it, e.g.
``from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository``.
Importing any module of this package opens no connection and starts no pool, timer or listener.
"""

__version__ = "0.1.0"
