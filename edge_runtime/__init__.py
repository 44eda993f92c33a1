"""QingLong edge runtime (Local Profile).

Import each layer from the sub-path that owns it; this root exports only the version:

- ``edge_runtime.contract.*``: exact-shape commands, records, results and errors (no I/O).
- ``edge_runtime.local.*``: the apsw/SQLite adapter (depends on contract).
- ``edge_runtime.service.*``: the device service (depends on local and contract).
- ``edge_runtime.cli``: the command line (depends on everything above).
"""

__version__ = "0.1.0"
