"""The errors of reading QingLong's data and of importing it (each with its stable code)."""

from __future__ import annotations

from edge_runtime.contract.errors import EdgeRuntimeError


class QingLongError(EdgeRuntimeError, code="QINGLONG_ERROR"):
    """Base of the errors of reading QingLong's data."""


class QingLongSourceError(QingLongError, code="QINGLONG_SOURCE_REFUSED"):
    """The path is not a QingLong data folder or backup this build reads, or it is refused as
    hostile (a member leaving the archive, a database too large, a link where a file must be):
    the message says what was found. Nothing was written."""


class QingLongSchemaError(QingLongError, code="QINGLONG_SCHEMA_UNKNOWN"):
    """The database is not one of QingLong's schemas this build knows (tables or columns
    missing, or a table that is not a table): the message lists what was found. Nothing was
    written."""


class ScriptsDirectoryError(QingLongError, code="SCRIPTS_DIRECTORY_REFUSED"):
    """The scripts directory cannot take the scripts: not a trusted directory, not enough free
    space, or a file there cannot be written (the message says which)."""
