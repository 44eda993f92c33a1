"""QingLong edge runtime (Local Profile).

Import each layer from the sub-path that owns it; this root exports only the version:

- ``edge_runtime.contract.*``: exact-shape commands, records, results and errors (no I/O).
- ``edge_runtime.local.*``: the apsw/SQLite adapter (depends on contract).
- ``edge_runtime.service.*``: the device service (depends on contract only: it reaches storage
  through the contract's ports, never through an adapter).
- ``edge_runtime.cli``: the command line and the composition roots (depends on local, service and
  contract; the only layer that picks an adapter).

``cluster_postgres`` (the separate ``cluster/`` distribution) depends on contract, service and cli,
never on local; nothing here imports it (docs/architecture.md).
"""

__version__ = "0.1.0"
