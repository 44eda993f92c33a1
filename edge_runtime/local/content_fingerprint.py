"""A fingerprint of what a database holds, for "nothing was written since" and "this copy is equal".

Per table (and the schema): the row count and a SHA-256 of the rows in an order of their own
values, so neither rowids nor page layout count: VACUUM may renumber and move rows without
changing the fingerprint, while any inserted, deleted or updated row, or any schema change, does.
The scrub's rollback gate (``legacy_token_scrub``) compares the fingerprint it recorded with the
database's, and a backup's with its source's.
"""

from __future__ import annotations

import hashlib

import apsw
import msgspec

_BATCH_ROWS = 512


def fingerprint_tables(connection: apsw.Connection, *, ignored_device_events: tuple[str, ...] = ()) -> dict[str, list]:
    """``{table: [rows, sha256 hex]}`` for every table and for ``sqlite_schema`` (without root
    pages), leaving out the ``device_events`` rows of the types named (a step's own records).
    SQLite's own tables are left out but ``sqlite_sequence``: the last id each AUTOINCREMENT
    table gave, which no row may show any more (an env entry's id is never given again)."""
    result = {"sqlite_schema": _digest_rows(connection, "SELECT type, name, tbl_name, sql FROM sqlite_schema", 4, ())}
    tables = connection.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND (name NOT LIKE 'sqlite^_%' ESCAPE '^' "
        "OR name = 'sqlite_sequence') ORDER BY name"
    ).fetchall()
    for (name,) in tables:
        quoted = '"{}"'.format(name.replace('"', '""'))
        columns = len(connection.execute(f"PRAGMA table_info({quoted})").fetchall())
        query, bindings = f"SELECT * FROM {quoted}", ()
        if name == "device_events" and ignored_device_events:
            query += f" WHERE type NOT IN ({', '.join('?' * len(ignored_device_events))})"
            bindings = ignored_device_events
        result[name] = _digest_rows(connection, query, columns, bindings)
    return result


def whole_fingerprint(fingerprints: dict[str, list]) -> str:
    """One SHA-256 hex of a :func:`fingerprint_tables` result."""
    return hashlib.sha256(msgspec.json.encode(dict(sorted(fingerprints.items())))).hexdigest()


def _digest_rows(connection: apsw.Connection, query: str, columns: int, bindings: tuple) -> list:
    # SQLite sorts (in C) by every column; Python hashes the rows' reprs a batch at a time.
    order = ", ".join(str(index) for index in range(1, columns + 1))
    digest = hashlib.sha256()
    count = 0
    batch: list = []
    for row in connection.execute(f"{query} ORDER BY {order}", bindings):
        batch.append(row)
        if len(batch) == _BATCH_ROWS:
            digest.update(repr(batch).encode("utf-8", "surrogatepass"))
            count += len(batch)
            batch.clear()
    digest.update(repr(batch).encode("utf-8", "surrogatepass"))
    return [count + len(batch), digest.hexdigest()]
