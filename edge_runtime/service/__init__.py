"""The device service: runs Attempts as local processes, dispatches cancellations, recovers.

Dependency direction: contract <- local, contract <- service, and cli (the composition root)
builds both; cluster_postgres -> service (it runs this service on PostgreSQL). This package
owns processes, signals, the event loop and restart recovery; it contains no SQL, imports no
adapter and changes durable state only through the ports of ``edge_runtime.contract.ports``. It
never holds a database transaction across a spawn, a signal or a wait.

Modules, one job each:

- ``process_identity``: who a pid is (start time, process group, boot id) from ``/proc``.
- ``controller``: the identity-checked SIGTERM/SIGKILL of an Attempt's process group.
- ``monitor`` (and ``native/monitor.c``): the per-Attempt monitor that outlives the service, and
  the exit status it leaves in the Attempt's status file (docs/monitor.md).
- ``log_capture``: the files an Attempt's monitor is handed, and the logs still being completed.
- ``executor``: spawning an Attempt under its monitor, in its own session and process group.
- ``script_task``: what a ``task`` command's Attempt runs (its script, program, folder, accounts).
- ``attempts/``: starting, watching and ending Attempts, one module per part and the state it
  owns (the start pass, identity recording, exits and ends, fences, lease renewals, logs,
  settlements; the in-memory record and its states as types); ``AttemptSupervisor`` builds them.
- ``worker``: this service's worker session and the Run Leases it holds.
- ``watch``: noticing that a child or re-adopted process has exited (pidfd or slow poll).
- ``dispatcher``: claims due cancellation dispatches and records what the controller did.
- ``recovery``: what a new worker session does with the Attempts of earlier ones.
- ``loop`` / ``service``: the single-threaded event loop and its lifecycle.
- ``journal``: the service's own log lines on stderr.
- ``config``: the exact-shape TOML configuration with environment and flag overrides.
"""
