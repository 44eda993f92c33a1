"""A task's own message handed to the running service (docs/notifications.md, "A script's own message").

**The token.** ``HMAC-SHA256(device key, attempt id)``, URL-safe base64 behind
``contract.task_notify.TOKEN_PREFIX``. The device key is 32 random bytes in ``<db>.notify-key``
(0600, owned by the service's user, beside the 0600 database, in its trusted directory): nothing
per Attempt is stored, and a restarted service opens the tokens of the Attempts it re-adopted.
A token proves which Attempt sent a message; whether that Attempt still runs is the store's
answer, in the transaction that queues the message (``enqueue_message(attempt_id=...)``).

**The socket.** A Linux abstract-namespace ``SOCK_SEQPACKET`` socket (one message each way, never
split) named from the digest of the database's real path. A task user must reach it, and the
database's directory is 0700 and the wake directory (``wake_dir.py``) trusted only because it is
0700 too: a socket file would need a directory of its own that every user may traverse, beside
a database that may live anywhere. An abstract name has no file and no mode: any local process
may connect, which is why the socket takes nothing but a valid token of a running Attempt. Any
local user may also bind the name first; so the client sends its token only to a peer that is
root or its own user (``SO_PEERCRED``), and the service logs the uid of every peer it refuses
or serves.

This module is the Local adapter's part: the key file, the name, the wire format, both ends.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import stat
import sys

from edge_runtime.contract.notifications import (
    MAX_BODY_BYTES,
    MAX_CHANNELS,
    MAX_TITLE_CHARS,
    NotifyError,
    NotifyServiceUnavailableError,
)
from edge_runtime.contract.task_notify import TOKEN_PREFIX, Capability, is_attempt_id, is_token
from edge_runtime.local.handoff import accept_when_ready

#: Beside the database: the device key the tokens are derived with.
KEY_SUFFIX = ".notify-key"
KEY_BYTES = 32
_DERIVATION_DOMAIN = b"edge-runtime.task-notify-token.v1\0"
#: The first field of every request.
REQUEST_MAGIC = b"edge-runtime-notify/1"
#: The largest request: a title, a body and the channels' names at their limits, with room to spare.
MAX_REQUEST_BYTES = 4 * MAX_TITLE_CHARS + MAX_BODY_BYTES + MAX_CHANNELS * 80 + 1024
#: The largest answer (a verdict, an error code and its message).
MAX_REPLY_BYTES = 4096
CONNECT_TIMEOUT_S = 2.0
#: Longer than the store's busy wait for the write lock: a busy service still answers in time.
REPLY_TIMEOUT_S = 30.0
#: How long the service waits for a connected client's request.
REQUEST_TIMEOUT_S = 2.0
OK, REFUSED = b"ok", b"error"
_SEPARATOR = b"\0"
_PEERCRED_SIZE = 12  # struct ucred: pid, uid, gid


class NotifyKeyError(NotifyError, code="NOTIFY_KEY_UNUSABLE"):
    """The device key beside the database is not a 0600 file of this user of the right size: the
    service gives tasks no capability (their ``notify send`` says so) until it is fixed or removed."""


def key_path(db_path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.fspath(db_path)) + KEY_SUFFIX


def load_or_create_key(db_path: str | os.PathLike[str]) -> bytes:
    """The device key, made on first use (0600, exclusive create: two services racing keep one).

    Raises:
        NotifyKeyError: the file is a symlink, another user's, readable by others, or of the wrong size.
    """
    path = key_path(db_path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise NotifyKeyError(f"{path}: cannot be created ({exc.strerror or exc})") from None
    else:
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise NotifyKeyError(f"{path}: cannot be opened ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise NotifyKeyError(f"{path}: not a file of uid {os.geteuid()} readable by it alone "
                                 f"(uid {info.st_uid}, mode {stat.filemode(info.st_mode)}); remove it to make a new one")
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise NotifyKeyError(f"{path}: {len(key)} bytes, not {KEY_BYTES} (a write cut short); remove it to make a new one")
    return key


def address_of(db_path: str | os.PathLike[str]) -> str:
    """The socket's name for the database at ``db_path`` (``@`` marks the abstract namespace)."""
    digest = hashlib.sha256(os.fsencode(os.path.realpath(os.fspath(db_path)))).hexdigest()[:32]
    return f"@edge-runtime-notify.{digest}"


def _bind_address(address: str) -> bytes:
    return b"\0" + address[1:].encode("ascii")


def derive_token(key: bytes, attempt_id: str) -> str:
    mac = hmac.new(key, _DERIVATION_DOMAIN + attempt_id.encode("utf-8"), hashlib.sha256).digest()
    return TOKEN_PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


class TaskCapabilities:
    """The service's issuer and checker of tokens, for one database."""

    __slots__ = ("address", "_key")

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        """Raises: NotifyKeyError."""
        self._key = load_or_create_key(db_path)
        self.address = address_of(db_path)

    def variable(self, attempt_id: str) -> str:
        """The value of ``EDGE_RUNTIME_NOTIFY`` for the Attempt ``attempt_id``."""
        return Capability(self.address, attempt_id, derive_token(self._key, attempt_id)).text()

    def opens(self, attempt_id: str, token: str) -> bool:
        """Whether ``token`` is the one of ``attempt_id`` (compared in constant time)."""
        return hmac.compare_digest(derive_token(self._key, attempt_id).encode(), token.encode("utf-8", "replace"))


# ----------------------------------------------------------------------------- the wire


class TaskMessage:
    """A task's request: its capability's Attempt and token, the message and the channels named."""

    __slots__ = ("attempt_id", "token", "title", "body", "channels")

    def __init__(self, attempt_id: str, token: str, title: str, body: str, channels: list[str]) -> None:
        self.attempt_id, self.token, self.title, self.body, self.channels = attempt_id, token, title, body, channels

    def encode(self) -> bytes:
        """Raises: NotifyError (a NUL in a field, or too large: checked before anything is sent)."""
        fields = [self.attempt_id, self.token, self.title, self.body, *self.channels]
        if any("\0" in field for field in fields):
            raise NotifyError("a NUL character in the title, body or a channel's name; nothing queued")
        message = _SEPARATOR.join([REQUEST_MAGIC, *(f.encode("utf-8", "surrogateescape") for f in fields)])
        if len(message) > MAX_REQUEST_BYTES:
            raise NotifyError(f"the message is larger than {MAX_REQUEST_BYTES} bytes; nothing queued")
        return message

    @classmethod
    def decode(cls, message: bytes) -> TaskMessage | None:
        fields = message.split(_SEPARATOR)
        if len(fields) < 5 or fields[0] != REQUEST_MAGIC or len(fields) - 5 > MAX_CHANNELS:
            return None
        try:
            attempt_id, token, title, body, *channels = (field.decode("utf-8") for field in fields[1:])
        except UnicodeDecodeError:
            return None
        if not (is_attempt_id(attempt_id) and is_token(token)):
            return None  # nothing of another shape is looked up, or logged
        return cls(attempt_id, token, title, body, channels)


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """The pid and uid at the other end of the connected Unix socket ``sock``."""
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED_SIZE)
    return int.from_bytes(credentials[0:4], sys.byteorder), int.from_bytes(credentials[4:8], sys.byteorder)


def send_to_service(capability: Capability, title: str, body: str, channels: list[str]) -> str:
    """Hand a task's message to the service; what it answered (the queued rows, one a line).

    Raises:
        NotifyError: refused by the service, with its code (``NOTIFY_TOKEN_INVALID``, ``NOTIFY_TASK_LIMIT``,
            ``NOTIFY_CHANNEL_NOT_FOUND``, ...), or could not be sent (``NOTIFY_SERVICE_UNAVAILABLE``).
    """
    message = TaskMessage(capability.attempt_id, capability.token, title, body, channels).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(_bind_address(capability.address))
        except OSError as exc:
            raise NotifyServiceUnavailableError(
                f"no service is listening for this task's messages ({exc.strerror or exc}); nothing queued") from None
        _, uid = peer_credentials(sock)
        if uid not in (0, os.geteuid()):
            # Anyone may bind an abstract name first: the token goes only to root or this user.
            raise NotifyServiceUnavailableError(
                f"the socket of this task's messages is held by uid {uid}, not by root or this user; nothing sent")
        try:
            sock.send(message)
            sock.settimeout(REPLY_TIMEOUT_S)
            reply = sock.recv(MAX_REPLY_BYTES)
        except OSError as exc:
            raise NotifyServiceUnavailableError(
                f"the service did not answer ({exc.strerror or exc}); the message may or may not be queued") from None
    finally:
        sock.close()
    verdict, _, rest = reply.partition(_SEPARATOR)
    text = rest.decode("utf-8", "replace")
    if verdict == OK:
        return text
    if verdict == REFUSED:
        code, _, detail = text.partition("\0")
        raise _error_of(code)(detail or "refused by the service")
    raise NotifyServiceUnavailableError("the service stopped before it answered; the message may or may not be queued")


def _error_of(code: str) -> type[NotifyError]:
    """The error class whose code the service named (one of the notify hierarchy), else the base."""
    classes, seen = [NotifyError], []
    while classes:
        cls = classes.pop()
        if cls.code == code:
            return cls
        seen.append(cls)
        classes.extend(sub for sub in cls.__subclasses__() if sub not in seen)
    return NotifyError


def answer(conn: socket.socket, verdict: bytes, text: str = "", code: str = "") -> None:
    """Raises: OSError (the client went away)."""
    payload = text if verdict == OK else f"{code}\0{text}"
    conn.send(verdict + _SEPARATOR + payload.encode("utf-8", "replace")[:MAX_REPLY_BYTES - 16])


class TaskMessageListener:
    """The service's end: the listening abstract socket (gone with the process, or ``close``)."""

    __slots__ = ("address", "_socket", "_stopping")

    def __init__(self, address: str) -> None:
        """Raises: OSError (the name is taken: another service on this database, or a squatter)."""
        self.address = address
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            self._socket.bind(_bind_address(address))
            self._socket.listen(16)
            self._socket.setblocking(False)
        except BaseException:
            self._socket.close()
            raise
        self._stopping = False

    def accept(self) -> socket.socket:
        """The next connection, with the request timeout set (waits in ``poll``, as the submit
        hand-off's listener does).

        Raises:
            OSError: shut down, or closed.
        """
        conn = accept_when_ready(self._socket, lambda: self._stopping, "the task message listener")
        conn.settimeout(REQUEST_TIMEOUT_S)
        return conn

    @property
    def stopping(self) -> bool:
        return self._stopping

    def shutdown(self) -> None:
        self._stopping = True
        self._socket.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._socket.close()
