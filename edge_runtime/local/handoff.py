"""The submit hand-off: a ``submit`` given to the running service over its socket.

A ``submit`` that opens the database itself pays for importing the whole command stack (argparse,
msgspec, apsw and the store: about 50 ms on x86_64, seconds on a router's CPU) for a few
milliseconds of work. A running service has all of it loaded, so the CLI hands the command line to
it instead: the service parses it with the same parser, checks it with the same contract and
stores it through the same store, and sends back what the command prints. A client of this
module imports nothing beyond the interpreter's start-up set and ``_socket``.

The socket is ``<pid>.submit`` (``SOCK_SEQPACKET``: one message each way, never split) in the
service's wake directory, whose rules (``wake_dir.py``) make it reachable by this user only; each
side also checks the other's credentials (``SO_PEERCRED``): the same user, or root.

The service answers one of three ways, and the client never guesses:

- ``ok``: the Run is stored; the message is what ``submit`` prints.
- ``fallback``: nothing was stored (a form the service does not take, a bad option, a refused
  command, a store error); the client runs the command itself, which reports any error exactly
  as it always does.
- no answer (the service stopped or timed out after the request was sent): whether the Run was
  stored is unknown, so the client says so and does not submit again (no duplicate Run).

A service that does not accept the connection (none running, an old one) is the same as
``fallback``: nothing was sent.
"""

from __future__ import annotations

import os
import sys

import _socket

from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.local import wake_dir

#: The first field of every request: what the service checks before reading the rest.
REQUEST_MAGIC = b"edge-runtime-submit/1"
#: A larger request (a very long command line) is not handed off: the client stores it itself.
MAX_REQUEST_BYTES = 128 * 1024
#: A service that does not take the connection within this is left alone (nothing was sent).
CONNECT_TIMEOUT_S = 1.0
#: How long the client waits for the answer once the request was sent: longer than the store's
#: busy wait for the database's write lock, so a busy service still answers in time.
REPLY_TIMEOUT_S = 30.0
#: How long the service waits for a connected client's request.
REQUEST_TIMEOUT_S = 2.0

OK, FALLBACK = b"ok", b"fallback"
_SEPARATOR = b"\0"
_PEERCRED_SIZE = 12  # struct ucred: pid, uid, gid (three 32-bit ints)


class HandoffRequest:
    """What the client sends: the database it means, its working directory and its arguments."""

    __slots__ = ("db_path", "cwd", "argv")

    def __init__(self, db_path: str, cwd: str, argv: list[str]) -> None:
        self.db_path, self.cwd, self.argv = db_path, cwd, argv

    def encode(self) -> bytes | None:
        """The request as one message; None when it cannot travel (a NUL in an argument, text
        that is not UTF-8, or more than ``MAX_REQUEST_BYTES``): then the client stores it itself."""
        fields = [self.db_path, self.cwd, *self.argv]
        if any("\0" in field for field in fields):
            return None
        try:
            message = _SEPARATOR.join([REQUEST_MAGIC, *(field.encode("utf-8") for field in fields)])
        except UnicodeEncodeError:
            return None
        return message if len(message) <= MAX_REQUEST_BYTES else None

    @classmethod
    def decode(cls, message: bytes) -> HandoffRequest | None:
        """The request in ``message``, or None when it is not one (wrong magic, too short, not UTF-8)."""
        fields = message.split(_SEPARATOR)
        if len(fields) < 3 or fields[0] != REQUEST_MAGIC:
            return None
        try:
            db_path, cwd, *argv = (field.decode("utf-8") for field in fields[1:])
        except UnicodeDecodeError:
            return None
        return cls(db_path, cwd, argv)


class SubmitUnconfirmedError(EdgeRuntimeError, code="SUBMIT_UNCONFIRMED"):
    """A ``submit`` was handed to the service, which stopped or timed out before it answered:
    whether the Run was stored is unknown (check ``list`` before submitting again)."""


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end of the connected Unix socket ``sock``."""
    credentials = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _PEERCRED_SIZE)
    return int.from_bytes(credentials[4:8], sys.byteorder)


def trusted_peer(uid: int) -> bool:
    """The other end may be this user or root (a root service serves root's own commands)."""
    return uid in (os.geteuid(), 0)


def hand_off(request: HandoffRequest) -> str | None:
    """Give ``request`` to a service running on its database; what ``submit`` prints on success,
    None when nothing was stored and the caller must run the command itself.

    Raises:
        SubmitUnconfirmedError: the request was sent and no answer came.
    """
    message = request.encode()
    if message is None:
        return None
    held: list[tuple[str, int]] = []
    try:
        for directory in wake_dir.wake_dir_paths(request.db_path):
            try:
                dir_fd = wake_dir.open_dir(directory)
            except OSError:
                return None  # a planted symlink or file: the client's own run stores and reports it
            if dir_fd is None:
                continue
            held.append((directory, dir_fd))
            if wake_dir.refusal(dir_fd) is not None:
                return None  # another user's directory: likewise, reported by the client's own run
        for directory, dir_fd in held:
            for name in sorted(os.listdir(dir_fd)):
                if name.endswith(wake_dir.SUBMIT_SOCKET_SUFFIX) and wake_dir.own_socket(dir_fd, name):
                    answer = _ask(dir_fd, directory, name, message)
                    if answer is not None:
                        return answer
    finally:
        for _, dir_fd in held:
            os.close(dir_fd)
    return None


def _ask(dir_fd: int, directory: str, name: str, message: bytes) -> str | None:
    address = wake_dir.socket_address(dir_fd, directory, name)
    if address is None:
        return None
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(address)
        except ConnectionRefusedError:
            # Its service died (kill -9, power cut): checked above to be our own socket in our directory.
            wake_dir.unlink_socket(dir_fd, name)
            return None
        except OSError:
            return None  # gone meanwhile, or not taking connections: nothing was sent
        if not trusted_peer(peer_uid(sock)):
            return None
        try:
            sock.send(message)
        except OSError:
            return None  # the service closed first: it did not take the request
        sock.settimeout(REPLY_TIMEOUT_S)
        try:
            reply = sock.recv(MAX_REQUEST_BYTES)
        except OSError as exc:
            raise SubmitUnconfirmedError(f"the service did not answer ({exc.strerror or exc})") from None
    finally:
        sock.close()
    verdict, _, output = reply.partition(_SEPARATOR)
    if verdict == OK:
        return output.decode("utf-8", "replace")
    if verdict == FALLBACK:
        return None
    raise SubmitUnconfirmedError("the service stopped before it answered" if not reply else "the service's answer was not understood")


def accept_when_ready(listener, stopping, name: str):
    """The next connection of the non-blocking ``listener``, waited for in ``poll``, not in a
    blocking ``accept``: Linux reserves the new descriptor's number for the whole of a blocking
    ``accept``, an invisible descriptor a service near its limit would miss.

    Raises:
        OSError: ``stopping()`` became true (the listener was shut down) or it was closed.
    """
    import select

    poller = select.poll()
    poller.register(listener.fileno(), select.POLLIN)
    while True:
        poller.poll()
        if stopping():
            raise OSError(f"{name} was shut down")
        try:
            conn, _ = listener.accept()
            return conn
        except (BlockingIOError, InterruptedError):
            continue  # the client gave up between the poll and the accept


class HandoffListener:
    """The service's end: the listening ``<pid>.submit`` socket, removed again by ``close``."""

    __slots__ = ("path", "_bound", "_stopping")

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        from edge_runtime.local.wake import bind_in_wake_dir  # the service side: its imports are paid already

        self._bound, _refused = bind_in_wake_dir(db_path, wake_dir.SUBMIT_SOCKET_SUFFIX, _socket.SOCK_SEQPACKET)
        self.path = self._bound.path
        self._bound.socket.listen(8)
        self._bound.socket.setblocking(False)
        self._stopping = False

    def accept(self):
        """Wait for the next connection (a ``socket.socket`` with the request timeout set); None
        for one from an untrusted peer, which is closed unread.

        The wait is :func:`accept_when_ready`'s.

        Raises:
            OSError: the listener was shut down (``shutdown``) or closed.
        """
        conn = accept_when_ready(self._bound.socket, lambda: self._stopping, "the submit hand-off listener")
        if not trusted_peer(peer_uid(conn)):
            conn.close()
            return None
        conn.settimeout(REQUEST_TIMEOUT_S)
        return conn

    @property
    def stopping(self) -> bool:
        """Whether ``shutdown`` was called (an ``OSError`` of ``accept`` is then the end, not a fault)."""
        return self._stopping

    def shutdown(self) -> None:
        """End a waiting ``accept`` in another thread (it raises ``OSError``)."""
        self._stopping = True
        if self._bound.socket is not None:
            self._bound.socket.shutdown(_socket.SHUT_RDWR)  # wakes the poll (POLLHUP)

    def close(self) -> None:
        self._bound.close()


def answer(conn, verdict: bytes, output: str = "") -> None:
    """Send the service's one answer on ``conn``.

    Raises:
        OSError: the client went away (it reports its Run as unconfirmed).
    """
    conn.send(verdict + _SEPARATOR + output.encode("utf-8"))
