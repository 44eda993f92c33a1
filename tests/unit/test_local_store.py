"""The Local adapter of the service's Store port, as the composition root builds it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from edge_runtime.contract import ports
from edge_runtime.local.clock import ManualClock
from edge_runtime.local.store import LocalStore, local_store_opener


def _port_methods(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}


def test_the_local_store_implements_every_operation_of_the_ports(tmp_path: Path) -> None:
    store = local_store_opener(str(tmp_path / "db"), clock=ManualClock(1_000))()
    try:
        assert isinstance(store, LocalStore) and store.where == str(tmp_path / "db")
        for attribute, protocol in (("runs", ports.RunStore), ("dispatches", ports.CancellationDispatchStore),
                                    ("leases", ports.WorkerLeaseStore)):
            missing = {m for m in _port_methods(protocol) if not callable(getattr(getattr(store, attribute), m, None))}
            assert missing == set(), f"{attribute} lacks {missing}"
        assert _port_methods(ports.Store) | _port_methods(ports.UserStore) <= {m for m in dir(store) if callable(getattr(store, m))}
        assert store.now_ms() == 1_000  # the store's time is the injected clock's
        wake = store.open_wake()
        try:
            assert wake.refused == [] and Path(wake.where).name.startswith("db.wake")
        finally:
            wake.close()
    finally:
        store.close()


def test_sqlite_notices_reach_the_service_log_and_its_errors_do_not() -> None:
    # In a fresh process: SQLite's log must be configured before its first connection.
    code = textwrap.dedent(
        """
        import apsw
        from edge_runtime.local.store import route_sqlite_log
        got = []
        assert route_sqlite_log(lambda code, message: got.append(message))
        apsw.log(apsw.SQLITE_NOTICE_RECOVER_WAL, "recovered 3 frames from WAL file")
        apsw.log(apsw.SQLITE_IOERR, "disk I/O error")
        print(got)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['recovered 3 frames from WAL file']"
