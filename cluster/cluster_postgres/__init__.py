"""QingLong Cluster Profile on PostgreSQL (``../shared/spec/cluster-profile.md``).

Exports only ``__version__``: import each thing from the module that owns it, e.g.
``from cluster_postgres.cancellation_dispatch import PostgresCancellationDispatchRepository``.
Importing any module of this package opens no connection and starts no pool, timer or listener.
"""

__version__ = "0.1.0"
