"""A QingLong-style multi-account secret and a task that splits it and prints each account, placed
so that the log capture's cap and a reader's 64 KiB chunk fall inside an account (the e2e tests of
masking: tests/e2e/test_task_options_e2e.py, tests/e2e/test_panel_api_e2e.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

from edge_runtime.contract.redaction import TRUNCATION_MARKER

#: Two accounts joined with `&`, as QingLong users keep a cookie: every printable byte of them is
#: one the task's filler (dots and line ends) never uses, so any byte of theirs shown is a leak.
ACCOUNTS = ("pt_key=AAQWE123RTY;pt_pin=ALICE99;", "pt_key=ZXCV456BNMQ;pt_pin=BOBBY77;")
COOKIE = "&".join(ACCOUNTS)
#: The cap ``serve --log-max-bytes`` is given; its first half is the log's kept beginning.
CAP = 4096
HEAD = CAP // 2
#: Into the cap's boundary (and the kept end's start) this many bytes of an account fall.
INSIDE = 8

#: The task: the whole value and each account on a line, dots up to INSIDE bytes before the end of
#: the kept beginning, the first account (cut by the cap), dots that are left out, the second
#: account and then dots so that the kept end begins INSIDE bytes before that account ends.
CAPPED_TASK = (
    'pad() { head -c "$1" /dev/zero | tr "\\0" .; }; '
    'printf "%s\\n" "$COOKIE"; IFS="&"; set -- $COOKIE; printf "%s\\n%s\\n" "$1" "$2"; '
    f'pad $(({HEAD - INSIDE} - ${{#COOKIE}} - ${{#1}} - ${{#2}} - 3)); printf %s "$1"; pad 5000; '
    f'printf %s "$2"; pad {HEAD - INSIDE}'
)
#: A task whose first account straddles byte 65536: the 64 KiB a reader reads at a time.
CHUNK_TASK = 'IFS="&"; set -- $COOKIE; head -c 65530 /dev/zero | tr "\\0" .; printf "%s\\n" "$1"'


def capped_task_shown() -> bytes:
    """What ``logs`` must print of CAPPED_TASK's log (its marker as the monitor wrote it)."""
    return (b"***\n***\n***\n" + b"." * (HEAD - INSIDE - len(COOKIE) - sum(map(len, ACCOUNTS)) - 3) + b"***"
            + b"\n[edge-runtime: output truncated: MARKER]\n" + b"***" + b"." * (HEAD - INSIDE))


def same_but_marker(shown: bytes, expected: bytes) -> bool:
    """``shown`` is ``expected`` with the monitor's actual marker in place of the placeholder."""
    return re.sub(rb"\n\[edge-runtime: output truncated: [^\]]*\]\n", b"\n[edge-runtime: output truncated: MARKER]\n",
                  shown) == expected and TRUNCATION_MARKER.search(shown) is not None


def leaked(text: str | bytes) -> set[str]:
    """The accounts' characters in ``text`` beyond markers and masks (none for masked output)."""
    raw = text.encode() if isinstance(text, str) else text
    rest = TRUNCATION_MARKER.sub(b"", raw).replace(b"***", b"").decode(errors="replace")
    return {piece for account in ACCOUNTS for piece in _pieces(account) if piece in rest}


def _pieces(account: str, size: int = 4) -> set[str]:
    return {account[i:i + size] for i in range(len(account) - size + 1)}


def set_secret(harness: Any, name: str, value: str) -> subprocess.CompletedProcess:
    """``env set NAME --secret --stdin``, the value piped in (never in the process list)."""
    return subprocess.run([sys.executable, "-m", "edge_runtime", "--db", str(harness.db_path), "env", "set", name,
                           "--secret", "--stdin"], input=value + "\n", capture_output=True, text=True,
                          env=harness.env, timeout=60, check=True)
