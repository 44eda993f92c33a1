"""A room for QingLong's shapes: what QingLong calls things, translated to the runtime's operations.

QingLong's language lives here and nowhere else: its SQLite schema and the data folder or
``data.tgz`` it keeps (``data_folder``, ``sqlite_reader``), the plan of what an import creates,
finds already here or skips, and why (``import_plan``, ``import_subscriptions``, applied by
``import_apply``), the headers its scripts carry (``script_headers``, ``script_scan``), its
subscriptions' pulls: fetching a repository or a file (``subscription_source``), choosing,
staging and swapping the folder and planning the schedules (``subscription_pull``); and its
OpenAPI (integer ids, ``{"code": 200}``, cron status 0-3, ``task x.js``): the exact route table
and what it refuses (``open_routes``), a schedule as a cron object (``crons``), an env entry as an
env object (``envs``), the Runs as log directories and files (``logs``) and the handlers
(``openapi``). Each module calls the same operations as the CLI and the panel
(``edge_runtime.operations`` and the ``Store`` port); the contract and the stores know nothing of
QingLong.

Everything read from QingLong (its database, its archive, its scripts' text) and everything a
client of its OpenAPI sends is hostile input: sizes, types and paths are checked before anything
is used (docs/qinglong.md, the threat model).

Dependency direction: qinglong -> contract (commands, expressions, variables; never a store's
adapter, local, nor the service) and -> ``edge_runtime.operations`` (the user operations the CLI
and panel share); cli -> qinglong composes them with a store (edge_runtime/cli/import_qinglong.py,
edge_runtime/cli/scripts.py, edge_runtime/cli/subscription.py), and ``serve`` hands the panel's
server the OpenAPI's face (edge_runtime/cli/serve.py). Only the composition roots import it:
contract, local, service, operations and the panel never do.
"""
