"""Secrets in what is shown: the one masking step of every output (docs/environment.md). Pure: no I/O.

Every output that may repeat a stored secret's value (the CLI's text and ``--json``, the web
panel's answers and its log view, the service's own log, and whatever output comes later: an
API description's examples, notifications) passes its values through one :class:`Redactor`,
built from the store's secrets by :func:`store_redactor`, *before* it quotes, encodes or cuts
them. Masking afterwards misses a value that quoting changed (``'`` becomes ``'"'"'`` in a shell
word, ``"`` becomes ``\\"`` in JSON), and a cut made first can leave a fragment on each side.

What is masked, for each secret: its whole value, and each of its ``&``- or line-separated parts
of at least :data:`MIN_SECRET_LENGTH` characters: a QingLong cookie holds several accounts joined
so (``pt_key=...;pt_pin=...&pt_key=...``), and a task splits it and prints each one.

A log is masked as a stream (:class:`LogMasker`): a value split across two reads is still
masked, and where the log itself was cut (the capture's truncation marker, the start of a stored
copy that kept only the end) whatever next to the cut could be the rest of a secret is masked too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TypeVar

import msgspec

from edge_runtime.contract.task_notify import TOKEN_BODY_ALPHABET, TOKEN_CHARS, TOKEN_PATTERN, TOKEN_PREFIX

#: What replaces a secret's value (or a part, or a fragment at a cut) in shown output.
MASK = "***"
#: The shortest secret ``env set --secret`` stores, and the shortest part of one masked on its
#: own. Masking a shorter value hides every occurrence of a common word or number ("2024",
#: "admin") and so both ruins the output and gives the secret away by where the mask appears.
MIN_SECRET_LENGTH = 8

#: A task's notify token (``task_notify.py``) is masked by its shape, wherever it appears, without
#: its value being known: the service hands one to every Attempt, and a task may print its
#: environment. Where a log was cut, the piece before the cut that begins a token with at least
#: :data:`_TOKEN_PIECE_SHOWN` characters of its body, and a run of more than twice that many of
#: its characters right after the cut (which may be a token's end), are masked too: a token's
#: two sides never show more than twice that many of its 43 characters (the rest, at least 174
#: bits, cannot be guessed).
_TOKEN_PIECE_SHOWN = 7
#: Its own search, not one alternative among the secrets': each keeps its literal-prefix scan.
_TOKEN_TEXT = re.compile(TOKEN_PATTERN)
_TOKEN_BYTES = re.compile(TOKEN_PATTERN.encode())
_TOKEN_HEAD = re.compile(re.escape(TOKEN_PREFIX).encode() + rb"[" + TOKEN_BODY_ALPHABET.encode()
                         + rb"]{%d,}\Z" % (_TOKEN_PIECE_SHOWN + 1))
_TOKEN_TAIL = re.compile(rb"[." + TOKEN_BODY_ALPHABET.encode() + rb"]{%d,%d}" % (2 * _TOKEN_PIECE_SHOWN + 1, TOKEN_CHARS))

#: What separates the accounts of a multi-account secret.
_PART_SEPARATORS = re.compile(r"[&\r\n]")
_MASK_BYTES = MASK.encode()

#: The lines the per-Attempt monitor (edge_runtime/service/native/monitor.c) writes where it cut
#: a log: between the kept beginning and the kept end of a log over its cap, and after the end of
#: output no longer read past ``log_linger_ms``; each a run of texts and numbers (``None``: one
#: ``%llu``). Whatever touches one may be a piece of a secret.
_MARKERS: tuple[tuple[bytes | None, ...], ...] = (
    (b"\n[edge-runtime: output truncated: ", None, b" bytes left out between the first ", None,
     b" bytes and the last ", None, b" bytes]\n"),
    (b"\n[edge-runtime: output capture stopped ", None, b" s after the attempt ended; processes it left running "
     b"still hold its output, which is no longer read]\n"),
)
_NUMBER_DIGITS = 20
TRUNCATION_MARKER = re.compile(b"|".join(
    b"".join(rb"\d{1,20}" if part is None else re.escape(part) for part in marker) for marker in _MARKERS))
#: The longest text a marker can be (every number at 20 digits): what a stream holds back so that
#: a marker split across two reads is still found.
MARKER_MAX_BYTES = max(sum(_NUMBER_DIGITS if part is None else len(part) for part in marker) for marker in _MARKERS)
#: How every marker ends: a copy that begins inside a marker shows this soon after its start.
_MARKER_END = b"]\n"


#: How each marker begins (its text up to its first number).
_MARKER_HEADS = tuple(marker[0] for marker in _MARKERS)
_TOKEN_PREFIX_BYTES = TOKEN_PREFIX.encode()
_TOKEN_BODY = re.compile(rb"[" + TOKEN_BODY_ALPHABET.encode() + rb"]*\Z")
#: The bytes a marker or a task token begins with: a live log's end is looked at from these only.
_FIRST_BYTES = frozenset({head[0] for head in _MARKER_HEADS} | {_TOKEN_PREFIX_BYTES[0]})


def _could_begin_marker(tail: bytes) -> bool:
    """Whether more output could make ``tail`` the beginning of a marker (a tail past a
    marker's first text is taken as one: such text is the monitor's, not a task's)."""
    return any(head.startswith(tail) or tail.startswith(head) for head in _MARKER_HEADS)


def _could_begin_token(tail: bytes) -> bool:
    """Whether more output could make ``tail`` a task token (its prefix, then its alphabet)."""
    if len(tail) >= TOKEN_CHARS:
        return False
    if len(tail) <= len(_TOKEN_PREFIX_BYTES):
        return _TOKEN_PREFIX_BYTES.startswith(tail)
    return tail.startswith(_TOKEN_PREFIX_BYTES) and _TOKEN_BODY.match(tail, len(_TOKEN_PREFIX_BYTES)) is not None


def _marker_end_length(data: bytes) -> int:
    """The length of the end of a marker ``data`` may begin with (a copy of a log's end that
    begins inside the marker), or 0. A lone line end could be a marker's last byte: 1."""
    end = data.find(_MARKER_END, 0, MARKER_MAX_BYTES)
    if end < 0:
        return 1 if data[:1] == b"\n" else 0
    piece = data[:end + len(_MARKER_END)]
    for marker in _MARKERS:
        left = len(piece)  # matched from the marker's end backwards, until the piece is used up
        for part in reversed(marker):
            if part is None:
                digits = len(piece[:left]) - len(piece[:left].rstrip(b"0123456789"))
                if not 0 < digits <= _NUMBER_DIGITS:
                    break
                left -= digits
            else:
                shared = min(len(part), left)
                if piece[left - shared:left] != part[len(part) - shared:]:
                    break
                left -= shared
            if left == 0:
                return len(piece)
    return 1 if data[:1] == b"\n" else 0


T = TypeVar("T")


def secret_parts(value: str) -> list[str]:
    """The ``&``- or line-separated parts of a secret's value, surrounding blanks stripped (a
    value without a separator has none)."""
    if not _PART_SEPARATORS.search(value):
        return []
    return [part for part in (p.strip(" \t") for p in _PART_SEPARATORS.split(value)) if part]


def masked_forms(value: str) -> set[str]:
    """The texts the mask hides for one secret: its whole value (whatever its length: a value
    stored before the minimum existed is hidden too) and each part of at least MIN_SECRET_LENGTH."""
    forms = {value} if value else set()
    forms.update(part for part in secret_parts(value) if len(part) >= MIN_SECRET_LENGTH)
    return forms


class Redactor:
    """The one masking step: every secret's value, and its long enough parts, as ``MASK``.

    Longer texts are tried first, so a value containing another is masked whole. Built once per
    output (the secrets are read from the store once) and used for each value it shows.
    """

    __slots__ = ("_forms", "_first_bytes", "_text", "_bytes", "_longest")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = sorted({form for secret in secrets for form in masked_forms(secret)}, key=len, reverse=True)
        encoded = sorted({form.encode() for form in forms}, key=len, reverse=True)
        self._forms = tuple(encoded)
        self._first_bytes = frozenset(form[0] for form in encoded)
        self._text = re.compile("|".join(map(re.escape, forms))) if forms else None
        self._bytes = re.compile(b"|".join(map(re.escape, encoded))) if encoded else None
        self._longest = max(len(encoded[0]) if encoded else 0, TOKEN_CHARS)

    def __bool__(self) -> bool:
        """Whether there is anything to mask: always (a task's notify token, by its shape)."""
        return True

    def text(self, value: str) -> str:
        """``value`` with every secret (and long enough part) and task token replaced by ``MASK``."""
        masked = value if self._text is None else self._text.sub(MASK, value)
        return _TOKEN_TEXT.sub(MASK, masked)  # a mask never makes a token: the order is free

    def value(self, value: Any) -> Any:
        """Builtins ``value`` (what ``msgspec.to_builtins`` gives) with every string masked; keys
        are names (a record's fields, a variable's name), never masked: the output keeps the shape
        a script expects."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        return value

    def record(self, record: T) -> T:
        """A contract record (a Struct) with every string masked, as the same type: what the text
        output of a record prints from."""
        return msgspec.convert(self.value(msgspec.to_builtins(record)), type=type(record))

    def records(self, records: Iterable[T]) -> list[T]:
        return [self.record(record) for record in records]

    def log(self, *, cut_at_start: bool = False) -> LogMasker:
        """A masker for one log read from its start, or, with ``cut_at_start``, from a point
        where the log was cut (a stored copy that kept only its end)."""
        return LogMasker(self, cut_at_start=cut_at_start)

    # ------------------------------------------------------------------ for LogMasker

    def _spans(self, data: bytes, start: int, stop: int, *, end: int, start_cut: bool,
               end_cut: bool) -> list[tuple[int, int]]:
        """The sorted spans of ``data[start:end]`` to mask: the piece right after a cut at
        ``start`` that could be the rest of a secret, every secret beginning before ``stop`` or
        inside that piece (it may end past ``stop``, never past ``end``), and the piece right
        before a cut at ``end`` that could begin one."""
        spans: list[tuple[int, int]] = []
        if start_cut and start < end:
            piece = data[start:min(end, start + self._longest)]
            if end_cut and any(data[start:end] in form for form in self._forms):
                return [(start, end)]  # all of it between two cuts lies inside one secret
            length = max((_rest_of(form, piece) for form in self._forms), default=0)
            tail = _TOKEN_TAIL.match(piece)
            length = max(length, 0 if tail is None else tail.end())
            if length:
                spans.append((start, start + length))
                stop = max(stop, start + length)
        for pattern in (_TOKEN_BYTES,) if self._bytes is None else (self._bytes, _TOKEN_BYTES):
            for match in pattern.finditer(data, start, end):
                if match.start() >= stop:
                    break
                spans.append(match.span())
        if end_cut and start < end:
            piece = data[max(start, end - self._longest):end]
            length = max((_beginning_of(form, piece) for form in self._forms), default=0)
            head = _TOKEN_HEAD.search(piece)
            length = max(length, 0 if head is None else len(piece) - head.start())
            if length:
                spans.append((end - length, end))
        return sorted(spans)


def _rest_of(form: bytes, piece: bytes) -> int:
    """The length of the longest start of ``piece`` that ends ``form`` (0: none)."""
    first = piece[:1]
    at = form.find(first)
    while at >= 0:
        if piece.startswith(form[at:]):
            return len(form) - at  # the first match from the left is the longest
        at = form.find(first, at + 1)
    return 0


def _beginning_of(form: bytes, piece: bytes) -> int:
    """The length of the longest end of ``piece`` that begins ``form`` (0: none)."""
    last = piece[-1:]
    at = form.rfind(last, 0, len(piece))
    while at >= 0:
        if piece.endswith(form[:at + 1]):
            return at + 1  # the first match from the right is the longest
        at = form.rfind(last, 0, at)
    return 0


def _joined(data: bytes, start: int, end: int, spans: list[tuple[int, int]]) -> bytes:
    """``data[start:end]`` with each of the sorted ``spans`` (overlapping ones merged) as one MASK."""
    merged: list[list[int]] = []
    for span_start, span_end in spans:
        if merged and span_start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], span_end)
        else:
            merged.append([span_start, span_end])
    out = []
    position = start
    for span_start, span_end in merged:
        out += (data[position:span_start], _MASK_BYTES)
        position = span_end
    out.append(data[position:end])
    return b"".join(out)


class LogMasker:
    """Masks a log fed in pieces (bytes as the task wrote them).

    The end of each piece that could begin a secret or a truncation marker is held back until the
    next piece (or :meth:`flush`), so a value split across two reads is masked whole; :attr:`held`
    says how much, for a reader that resumes from an offset with a masker of its own. Where the
    log was cut (a :data:`TRUNCATION_MARKER`, or the start, with ``cut_at_start``), the bytes
    before the cut that could begin a secret and those after it that could end one are masked as
    well: the two halves of a secret the cut split never show on either side of it. A marker is
    only let through together with what follows it up to past any such piece, so a reader resuming
    where this one stopped never starts at a cut.
    """

    __slots__ = ("_redactor", "_pending", "_after_cut", "_at_cut_start", "_keep", "_after_marker")

    def __init__(self, redactor: Redactor, *, cut_at_start: bool = False) -> None:
        self._redactor = redactor
        self._pending = b""
        self._after_cut = cut_at_start
        #: A log cut at its start may begin inside a marker: its end is looked for first.
        self._at_cut_start = cut_at_start
        longest = redactor._longest
        #: Held back at the end: a secret's beginning (``longest - 1`` bytes) before a marker that
        #: has not fully arrived (``MARKER_MAX_BYTES - 1``) must still be unsent.
        self._keep = longest - 1 + MARKER_MAX_BYTES - 1 if longest else 0
        #: What must follow a cut before anything after it is sent: the piece that may end a
        #: secret, a secret starting inside that piece, and the usual hold-back.
        self._after_marker = self._keep + longest

    def _unsure_from(self, data: bytes, position: int) -> int:
        """Where the end of ``data`` (from ``position``) could still become a secret or a task
        token once more arrives, or a marker with a secret's beginning before it: what is held
        back from there. Only such an end is held (at most ``_keep`` bytes), so a live log's last
        line shows as soon as it cannot be one."""
        redactor = self._redactor
        longest = redactor._longest
        # With no secret kept, only a task token's beginning is held: a marker is then looked for
        # only for the token (at most a few of its characters show where the monitor cut a log,
        # said in _TOKEN_PIECE_SHOWN), and a line's end is not held back for it.
        markers = bool(redactor._forms)
        for start in range(max(position, len(data) - self._keep), len(data)):
            if data[start] not in _FIRST_BYTES and data[start] not in redactor._first_bytes:
                continue
            tail = data[start:]
            if any(form.startswith(tail) for form in redactor._forms) or _could_begin_token(tail):
                return start
            if markers and _could_begin_marker(tail):
                return max(position, start - (longest - 1))
        return len(data)

    @property
    def held(self) -> int:
        """How many bytes fed so far are held back (they could begin a secret or a marker)."""
        return len(self._pending)

    @property
    def most_held(self) -> int:
        """The most bytes :attr:`held` can be: a reader that reads more at once always advances."""
        return MARKER_MAX_BYTES + self._after_marker

    def feed(self, data: bytes) -> bytes:
        return self._run(self._pending + data, final=False)

    def flush(self) -> bytes:
        """The rest, at the end of the log."""
        return self._run(self._pending, final=True)

    def _run(self, data: bytes, *, final: bool) -> bytes:
        redactor = self._redactor
        if not redactor:
            self._pending = b""
            return data
        out: list[bytes] = []
        position = 0
        if self._at_cut_start:
            if not final and len(data) < MARKER_MAX_BYTES and _MARKER_END not in data:
                self._pending = data
                return b""
            self._at_cut_start = False
            position = _marker_end_length(data)
            out.append(data[:position])
        for marker in TRUNCATION_MARKER.finditer(data, position):
            start, end = marker.span()
            spans = redactor._spans(data, position, start, end=start, start_cut=self._after_cut, end_cut=True)
            out.append(_joined(data, position, start, spans))
            self._after_cut = False
            position = start
            if not final and len(data) - end < self._after_marker:
                break  # the marker goes with what follows it, once that has arrived
            out.append(data[start:end])
            self._after_cut = True
            position = end
        else:
            waiting = self._after_cut and len(data) - position < self._after_marker
            stop = len(data) if final else position if waiting else self._unsure_from(data, position)
            if stop > position:
                spans = redactor._spans(data, position, stop, end=len(data), start_cut=self._after_cut,
                                        end_cut=False)
                done = max([stop, *(span_end for _, span_end in spans)])
                out.append(_joined(data, position, done, spans))
                self._after_cut = False
                position = done
        self._pending = data[position:]
        return b"".join(out)


def store_redactor(store: Any) -> Redactor:
    """The redactor of the secrets ``store`` keeps now (none where it keeps no variables): what
    every output over the ``Store`` port masks with."""
    environment = getattr(store, "environment", None)
    notifications = getattr(store, "notifications", None)  # notification channels' tokens and keys
    secrets = [] if environment is None else list(environment.secret_values())
    if notifications is not None:
        secrets.extend(notifications.secret_values())
    return Redactor(secrets)
