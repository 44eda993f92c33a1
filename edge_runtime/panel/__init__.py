"""The web panel (docs/panel.md): served by ``serve`` inside the service process when
``panel_listen`` is set, and imported only then (``edge_runtime.cli.serve``).

- ``routes``: the one route table and the one gate (host, CSRF, session) before any handler;
- ``api``: the handlers, calling ``edge_runtime.operations`` as the CLI commands do;
- ``server``: the HTTP/1.1 server (``h11``) in a thread of its own, with its limits;
- ``static/``: the page (HTML, CSS, plain JS; no build step, nothing fetched from elsewhere).

Dependency direction: panel -> operations and contract (a face of the runtime's own, on the
operations the CLI shares), and local for what only the Local store has (its password and
sessions, the clock's watermark, the log directory's total); only ``cli.serve`` imports it.
"""
