"""The one masking step of every output (edge_runtime/contract/redaction.py, docs/environment.md):
a secret's whole value and each of its ``&``- or line-separated parts, in text, in records, and in
a log read in pieces, across the capture's truncation marker and the start of a copy cut short."""

from __future__ import annotations

import itertools
import shlex

import msgspec
import pytest

from edge_runtime.contract.redaction import (
    MARKER_MAX_BYTES,
    MIN_SECRET_LENGTH,
    TRUNCATION_MARKER,
    Redactor,
    _marker_end_length,
    masked_forms,
    secret_parts,
)

ALICE = "pt_key=AAAA1111aaaa;pt_pin=alice;"
BOB = "pt_key=BBBB2222bbbb;pt_pin=bob;"
COOKIE = f"{ALICE}&{BOB}"
MARKER = (b"\n[edge-runtime: output truncated: 4242 bytes left out between the first 2048 bytes "
          b"and the last 2048 bytes]\n")
LINGER = (b"\n[edge-runtime: output capture stopped 30 s after the attempt ended; processes it left running "
          b"still hold its output, which is no longer read]\n")


def _pieces(data: bytes, cuts: tuple[int, ...]) -> list[bytes]:
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def _streamed(redactor: Redactor, pieces: list[bytes], *, cut_at_start: bool = False) -> bytes:
    masker = redactor.log(cut_at_start=cut_at_start)
    return b"".join(masker.feed(piece) for piece in pieces) + masker.flush()


def test_the_whole_value_and_each_long_enough_part_are_masked() -> None:
    assert secret_parts(COOKIE) == [ALICE, BOB]
    assert secret_parts(f"{ALICE}\n{BOB}\r\n") == [ALICE, BOB]
    assert secret_parts("no-separator-here") == []
    redactor = Redactor([COOKIE])
    shown = redactor.text(f"all={COOKIE} one={ALICE} two={BOB} lines={ALICE}\n{BOB}")
    assert shown == "all=*** one=*** two=*** lines=***\n***"
    # A part shorter than the minimum is not a secret on its own (a URL's `v=2`): masked only whole.
    url = "https://example.com/hook?token=abcdef123&v=2"
    assert masked_forms(url) == {url, "https://example.com/hook?token=abcdef123"}
    assert Redactor([url]).text("v=2 and token=abcdef123") == "v=2 and token=abcdef123"


def test_a_short_secret_stored_before_the_minimum_is_still_masked_whole() -> None:
    assert len("1234") < MIN_SECRET_LENGTH
    assert Redactor(["1234"]).text("pin 1234, year 2024") == "pin ***, year 2024"
    assert Redactor([""]).text("nothing to hide") == "nothing to hide"  # an empty value masks nothing
    # Never empty: a task's notify token is masked by its shape, without a stored secret.
    assert Redactor([]) and Redactor([]).text("nothing to hide") == "nothing to hide"


def test_the_longest_form_wins_and_records_keep_their_shape() -> None:
    redactor = Redactor(["secret-one", "secret-one-and-more"])
    assert redactor.text("x secret-one-and-more y secret-one") == "x *** y ***"

    class Record(msgspec.Struct, rename="camel", kw_only=True):
        run_id: str
        command: list[str]
        env: dict[str, str]
        count: int

    record = Record(run_id="r1", command=["echo", "secret-one"], env={"secret-one": "secret-one"}, count=3)
    masked = redactor.record(record)
    assert masked == Record(run_id="r1", command=["echo", "***"], env={"secret-one": "***"}, count=3)
    assert redactor.value({"a": ["secret-one", 1, None]}) == {"a": ["***", 1, None]}


@pytest.mark.parametrize(("secret", "quote"), [
    ("it's-a-secret", shlex.join),
    ('say-"secret"-now', lambda argv: msgspec.json.encode(argv).decode()),
    ("back\\slash-secret", lambda argv: msgspec.json.encode(argv).decode()),
    ("tab\tsecret-x", lambda argv: msgspec.json.encode(argv).decode()),
])
def test_masking_before_quoting_catches_what_quoting_would_change(secret: str, quote) -> None:
    redactor = Redactor([secret])
    argv = ["sh", "-c", f"echo {secret}"]
    # Quoted first, the value is no longer in the text: a mask applied after would miss it.
    assert redactor.text(quote(argv)) == quote(argv) and secret not in quote(argv)
    assert redactor.value(argv) == ["sh", "-c", "echo ***"]
    assert "secret" not in quote(redactor.value(argv))


def test_a_log_fed_in_any_two_or_three_pieces_masks_every_secret() -> None:
    redactor = Redactor([COOKIE, "hunter2-secret"])
    log = f"start {ALICE} mid {BOB}\nall {COOKIE} end hunter2-secret.".encode()
    expected = b"start *** mid ***\nall *** end ***."
    for cuts in itertools.chain(itertools.combinations(range(1, len(log)), 1),
                                itertools.combinations(range(1, len(log), 7), 2)):
        assert _streamed(redactor, _pieces(log, cuts)) == expected, cuts
    assert _streamed(Redactor([]), [b"as ", b"is"]) == b"as is"


@pytest.mark.parametrize("split", [1, 7, len(ALICE) - 1])
@pytest.mark.parametrize("marker", [MARKER, LINGER], ids=["truncated", "linger"])
def test_a_secret_cut_by_a_marker_shows_neither_half(split: int, marker: bytes) -> None:
    """The monitor keeps a log's beginning and end around a marker: a secret printed across the
    cap boundary has its first half before the marker and its last half after it."""
    redactor = Redactor([COOKIE])
    log = b"head " + ALICE[:split].encode() + marker + ALICE[split:].encode() + b" tail " + BOB.encode() + b"\n"
    expected = b"head ***" + marker + b"*** tail ***\n"
    for cuts in itertools.combinations(range(1, len(log), 3), 1):
        assert _streamed(redactor, _pieces(log, cuts)) == expected, cuts
    for cuts in itertools.combinations(range(1, len(log), 17), 2):
        assert _streamed(redactor, _pieces(log, cuts)) == expected, cuts


def test_a_copy_that_begins_inside_a_marker_treats_its_end_as_the_cut() -> None:
    redactor = Redactor([COOKIE])
    for start in range(len(MARKER)):
        copy = MARKER[start:] + BOB[3:].encode() + b" tail\n"
        assert _streamed(redactor, [copy[:5], copy[5:]], cut_at_start=True) == MARKER[start:] + b"*** tail\n", start
        assert _marker_end_length(copy) == len(MARKER) - start


def test_text_next_to_a_marker_that_is_no_secret_piece_stays() -> None:
    redactor = Redactor([COOKIE])
    log = b"plain head" + MARKER + b"plain tail\n"
    assert _streamed(redactor, [log]) == log
    assert len(MARKER) <= MARKER_MAX_BYTES and TRUNCATION_MARKER.fullmatch(MARKER)


def test_a_copy_that_kept_only_the_end_masks_a_secrets_rest_at_its_start() -> None:
    redactor = Redactor([COOKIE])
    rest = BOB[5:].encode()
    assert _streamed(redactor, [rest + b" and more\n"], cut_at_start=True) == b"*** and more\n"
    assert _streamed(redactor, [rest[:3], rest[3:] + b" x"], cut_at_start=True) == b"*** x"
    # Not cut: the same bytes are ordinary text.
    assert _streamed(redactor, [rest + b" and more\n"]) == rest + b" and more\n"
    # Between two cuts, a piece from the middle of a secret is hidden whole.
    middle = ALICE[4:12].encode()
    assert _streamed(redactor, [middle + MARKER + b"after\n"], cut_at_start=True) == b"***" + MARKER + b"after\n"


def test_a_reader_resuming_from_where_the_held_back_bytes_begin_never_shows_a_piece() -> None:
    """The panel asks for a log in chunks, each from the last answer's ``nextOffset`` (the bytes
    read minus those held back), with a masker of its own each time."""
    redactor = Redactor([COOKIE])
    log = (b"x" * 50 + ALICE[:9].encode() + MARKER + ALICE[9:].encode() + b"\n" + b"y" * 40 + BOB.encode()
           + b"\n" + b"z" * 30)
    for size in (len(MARKER) + len(COOKIE) * 2 + 1, 300, 1000):
        offset, shown, rounds = 0, b"", 0
        while offset < len(log):
            data = log[offset:offset + size]
            masker = redactor.log()
            text = masker.feed(data)
            if offset + len(data) >= len(log):
                text += masker.flush()
                offset = len(log)
            else:
                offset += len(data) - masker.held
            shown += text
            rounds += 1
            assert rounds < 100, "no progress"
        assert shown == b"x" * 50 + b"***" + MARKER + b"***\n" + b"y" * 40 + b"***\n" + b"z" * 30, size


SEED = 20260611
_FILLER = b" x.\n"
_SECRET_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWYZabcdefghijklmnopqrstuvwyz0123456789;=_"  # never a filler byte


def _capped(output: bytes, cap: int, tail: int) -> bytes:
    """What the monitor leaves of ``output`` under ``cap``: its beginning, a marker, its end."""
    if len(output) <= cap:
        return output
    tail = min(tail, cap // 2)
    head = cap - tail
    return (output[:head] + f"\n[edge-runtime: output truncated: {len(output) - cap} bytes left out between the first "
            f"{head} bytes and the last {tail} bytes]\n".encode() + output[-tail:])


def _leaked(shown: bytes, *, copy: bool) -> bytes:
    """What ``shown`` holds beyond filler, markers (the end of one a copy may begin inside) and
    masks: pieces of secrets."""
    if copy:
        shown = shown[_marker_end_length(shown):]
    rest = TRUNCATION_MARKER.sub(b"", shown).replace(b"***", b"")
    return bytes(sorted(set(rest) - set(_FILLER)))


def test_no_piece_of_a_secret_shows_whatever_the_cap_the_copy_and_the_reads() -> None:
    """Random tasks printing secrets whole and part by part, cut by the capture's cap, read whole
    or by a resuming reader, or as a copy that kept only the end (seed printed on failure)."""
    import random

    rng = random.Random(SEED)
    for case in range(300):
        accounts = ["".join(rng.choice(_SECRET_CHARS) for _ in range(rng.randint(MIN_SECRET_LENGTH, 24)))
                    for _ in range(rng.randint(1, 3))]
        secret = rng.choice("&\n").join(accounts)
        redactor = Redactor([secret])
        output = b"".join(rng.choice([bytes([rng.choice(_FILLER)]) * rng.randint(1, 40), secret.encode(),
                                      rng.choice(accounts).encode()]) for _ in range(rng.randint(1, 30)))
        log = _capped(output, cap=rng.randint(20, 400), tail=rng.randint(1, 10) if rng.random() < 0.3 else 60)
        copy = log[-rng.randint(1, len(log)):] if rng.random() < 0.3 else None
        data = copy if copy is not None else log
        if rng.random() < 0.5 or copy is not None:
            cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 6))))
            shown = _streamed(redactor, _pieces(data, tuple(cuts)), cut_at_start=copy is not None)
        else:
            shown, offset = b"", 0
            while offset < len(data):
                masker = redactor.log()
                chunk = data[offset:offset + max(rng.randint(1, 300), masker.most_held + 1)]
                text = masker.feed(chunk)
                if offset + len(chunk) >= len(data):
                    shown, offset = shown + text + masker.flush(), len(data)
                else:
                    shown, offset = shown + text, offset + len(chunk) - masker.held
        assert not _leaked(shown, copy=copy is not None), f"seed {SEED} case {case}: {secret!r} shown as {shown!r}"


def test_a_live_logs_end_is_held_back_only_where_it_could_begin_a_secret_or_a_token() -> None:
    # No secret kept: a line's end shows at once (a live tail shows the task's last line).
    masker = Redactor([]).log()
    assert masker.feed(b"started\n") == b"started\n" and masker.held == 0
    assert masker.feed(b"token ern1.AbC") == b"token " and masker.held == len(b"ern1.AbC")
    assert masker.feed(b" no") == b"ern1.AbC no" and masker.held == 0
    # A secret kept: only the piece that could begin it is held, then masked once it has come.
    masker = Redactor(["pt_key=supersecret"]).log()
    assert masker.feed(b"x pt_key=sup") == b"x " and masker.held == len(b"pt_key=sup")
    assert masker.feed(b"ersecret;\n") + masker.flush() == b"***;\n"
