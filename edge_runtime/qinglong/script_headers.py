"""What a script's header asks for: its name and its schedule, read as QingLong's subscriptions read them.

QingLong's ``ql repo``/``ql raw`` give each new script a cron from its text (docs/qinglong.md,
"Scripts and their headers"); the same rules, in the same order, decide here:

Schedule, the first rule that finds one:

1. **Quantumult X**: a line with 5 or 6 cron fields followed, after a space, comma or quote, by
   text that names the script's file (``15 8 * * * jd_bean.js``,
   ``// 0 9 * * * jd_a.js, tag=x``, ``cron "5 0 * * *" script-path=https://x/jd_a.js``,
   ``0 9 * * * python3 x.py``).
2. **``cron:``**: the fields after ``cron:`` (``# cron: 23 11,13,21 * * *``).
3. **Loon**: the fields inside ``cron "..."``.

A field is digits and ``*``, with ``,`` ``-`` ``/`` between them (rule 1, as QingLong's); rules 2
and 3 also take ``?``, ``L``, ``W``, ``#`` and month or day names, or one ``@daily``-style word.
The expression ends where the fields end: what follows (a file name, ``python3 x.py``, a tag) is
never read as a field. Whether the expression is valid is the cron parser's question
(:mod:`edge_runtime.qinglong.script_scan` asks it), not this module's.

Name: the first string literal of ``new Env(...)``; else the text after ``name:`` on a comment
line (``// name: x``, `` * @name: 活动名``, a line inside ``/* */`` or a Python docstring); else
the file's name.

Where this differs from QingLong's shell, on purpose (QingLong's behaviour there is a defect):

- rule 1 also matches a script in a folder (``dir/x.js``: its line names ``x.js``);
- the first matching line wins, not the smallest in byte order;
- a JSDoc star before the fields (`` * 0 9 * * * f.js``) is the comment's, not a sixth field;
- ``cron:`` keeps only the fields (QingLong keeps ``other.js`` in ``cron: 0 9 * * * other.js``);
- Loon's closing quote may end the line;
- ``new Env('A(B)C')`` is ``A(B)C`` (QingLong cuts at the inner parenthesis), a backtick
  literal loses its backticks, and a ``:`` inside a name is kept.

Only lines of at most :data:`MAX_HEADER_LINE` characters are read for rules 1-3 and ``name:``
(minified code is not a header); ``new Env(`` is found on a line of any length. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re

import msgspec

#: Longest line read as a header line (cron rules, ``name:``); minified code lines are longer.
MAX_HEADER_LINE = 1000
#: Longest name kept (a schedule's name: ``edge_runtime.contract.runs.MAX_NAME_LENGTH``).
MAX_NAME_LENGTH = 128

# A field of rule 1: digits and `*`, joined by `,` `-` `/`, ending in a digit or `*` (QingLong's).
_QX_FIELD = r"[0-9*](?:[0-9*,/\-]*[0-9*])?"
# 5 or 6 fields at a word's start, followed by a space, tab, comma or quote.
_QX_EXPRESSION = re.compile(rf"(?<![^\s\"'=(/,])({_QX_FIELD}(?:[ \t]+{_QX_FIELD}){{4,5}})(?=[ \t,\"'])")
# A comment's leading marker (`//`, `#`, `/*`, a JSDoc `*` followed by a blank).
_COMMENT_MARKER = re.compile(r"^\s*(?://+|#+|/\*+|\*+(?=\s))\s*")
_NAMES = "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|sun|mon|tue|wed|thu|fri|sat"
# A field of rules 2 and 3: rule 1's, and `?`, `L`, `W`, `#`, month and day names.
_LOOSE_FIELD = re.compile(
    rf"(?:[0-9*?L][0-9*?LW#,/\-]*[0-9*?LW]|[0-9*?L]|(?:{_NAMES})(?:[-,/](?:[0-9]+|{_NAMES}))*)", re.IGNORECASE)
_MACRO = re.compile(r"@(?:yearly|annually|monthly|weekly|daily|midnight|hourly)", re.IGNORECASE)
_CRON_COLON = re.compile(r"cron\s*[:：]", re.IGNORECASE)
_LOON = re.compile(r"cron\s+([\"'])(.*?)\1")
_NEW_ENV = re.compile(r"new\s+Env\s*\(\s*(?:([\"'])(.*?)\1|`([^`]*)`)")
_NAME_LINE = re.compile(r"^@?name\s*[:：]\s*(.*)$", re.IGNORECASE)
# Separators people paste (chat, Chinese documents) count as blanks between fields.
_BLANKS = re.compile(r"[\s\u3000\u00a0]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class HeaderSchedule(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """The expression a header gives, as written (fields joined by one space), with the rule
    that found it and its line (from 1)."""

    expression: str
    rule: str  # "quantumult-x", "cron:" or "loon"
    line: int


class ScriptHeader(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """A script's name (and which rule gave it) and the schedule its header asks for, if any."""

    name: str
    name_rule: str  # "new Env", "name:" or "file name"
    schedule: HeaderSchedule | None = None


def read_header(text: str, file_name: str) -> ScriptHeader:
    """The header of a script whose text is ``text`` and whose file is ``file_name`` (its path
    in the scripts folder; rule 1 looks for its last part)."""
    base = file_name.rsplit("/", 1)[-1]
    lines = text.splitlines()
    name, name_rule = _name(lines)
    if name is None:
        name, name_rule = _clean_name(base) or base[:MAX_NAME_LENGTH], "file name"
    return ScriptHeader(name=name, name_rule=name_rule, schedule=_schedule(lines, base))


def _schedule(lines: list[str], base: str) -> HeaderSchedule | None:
    names = re.compile(rf"(?<![^\s\"'=/,(:]){re.escape(base)}(?![^\s\"',;)?#&])") if base else None
    short = [(number, line) for number, line in enumerate(lines, 1) if len(line) <= MAX_HEADER_LINE]
    if names is not None:
        for number, line in short:
            expression = _quantumult_x(line, names)
            if expression is not None:
                return HeaderSchedule(expression=expression, rule="quantumult-x", line=number)
    for number, line in short:
        for found in _CRON_COLON.finditer(line):
            expression = _fields(line[found.end():])
            if expression is not None:
                return HeaderSchedule(expression=expression, rule="cron:", line=number)
    for number, line in short:
        for found in _LOON.finditer(line):
            expression = _fields(found.group(2))
            if expression is not None:
                return HeaderSchedule(expression=expression, rule="loon", line=number)
    return None


def _quantumult_x(line: str, names: re.Pattern[str]) -> str | None:
    """Rule 1 on one line: the comment's marker dropped first (so a JSDoc ``*`` is not a field),
    then the line as it is (``* * * * * f.js`` is every minute)."""
    marker = _COMMENT_MARKER.match(line)
    candidates = (line[marker.end():], line) if marker and marker.end() else (line,)
    for candidate in candidates:
        for found in _QX_EXPRESSION.finditer(candidate):
            if names.search(candidate, found.end()):
                return " ".join(found.group(1).split())
    return None


def _fields(text: str) -> str | None:
    """The 5 or 6 fields (or one ``@daily`` word) at the start of ``text``; what follows them is
    not read. None when there are fewer than 5."""
    words = _BLANKS.split(text.strip(" \t\u3000\u00a0\"'`"))
    if words and _MACRO.fullmatch(words[0].strip("\"'`")):
        return words[0].strip("\"'`").lower()
    fields: list[str] = []
    for word in words:
        word = word.strip("\"'`")
        if len(fields) == 6:
            break
        if _LOOSE_FIELD.fullmatch(word):
            fields.append(word)
            continue
        if _LOOSE_FIELD.fullmatch(word.rstrip(",;")):  # `0 9 * * *, tag=x`: the comma ends the fields
            fields.append(word.rstrip(",;"))
        break
    return " ".join(fields) if len(fields) >= 5 else None


def _name(lines: list[str]) -> tuple[str | None, str]:
    for line in lines:
        if "Env" not in line:
            continue
        found = _NEW_ENV.search(line)
        if found is not None:
            name = _clean_name(found.group(2) if found.group(2) is not None else found.group(3))
            if name:
                return name, "new Env"
    in_block = False
    for line in lines:
        starts_in_block = in_block
        in_block = _block_state(line, in_block)
        if len(line) > MAX_HEADER_LINE:
            continue
        marker = _COMMENT_MARKER.match(line)
        if not (starts_in_block or (marker and marker.end())):
            continue
        found = _NAME_LINE.match(line[marker.end():] if marker else line.strip())
        if found is not None:
            name = _clean_name(re.sub(r"\s*(?:\*/|-->|\"\"\"|''')\s*$", "", found.group(1)).strip("\"'` ,;"))
            if name:
                return name, "name:"
    return None, "file name"


def _block_state(line: str, in_block: bool) -> bool:
    """Whether a block comment (``/* */``) or a Python docstring is open after ``line`` (an
    approximation: the markers are not looked for inside strings)."""
    for token in re.findall(r"/\*|\*/|\"\"\"|'''", line):
        if token == "/*":
            in_block = True
        elif token == "*/":
            in_block = False
        else:
            in_block = not in_block
    return in_block


def _clean_name(text: str | None) -> str:
    """A name fit to store: control characters made spaces, blanks at its ends dropped, at most
    MAX_NAME_LENGTH characters (inside, it stays as written: QingLong keeps it so)."""
    if not text:
        return ""
    return _CONTROL.sub(" ", text).strip(" \u3000\u00a0")[:MAX_NAME_LENGTH].rstrip(" \u3000\u00a0")


def random_daily_expression(seed: str, path: str) -> str:
    """A daily ``M H * * *`` for a script without a schedule in its header, the same for the same
    ``seed`` and script ``path`` (QingLong picks a random time; here it is reproducible, and
    each script gets its own, where QingLong gives one pull's scripts all the same)."""
    digest = hashlib.sha256(f"{seed}\x00{path}".encode()).digest()
    minute = int.from_bytes(digest[:4], "big") % 60
    hour = int.from_bytes(digest[4:8], "big") % 24
    return f"{minute} {hour} * * *"
