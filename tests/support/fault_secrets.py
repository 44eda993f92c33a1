"""Secrets at rest: the raw bytes of every lease token issued must appear in nothing written.

Campaigns register each raw token they hand to a repository and each directory the runtime wrote
into; the recording VFS also keeps every chunk ever written (overwritten pages included). The
scan looks for the UTF-8 bytes of each token in all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

ISSUED_TOKENS: set[str] = set()
RUNTIME_DIRS: list[Path] = []


def register(tokens: Iterable[str], directory: Path | None = None) -> None:
    ISSUED_TOKENS.update(tokens)
    if directory is not None:
        RUNTIME_DIRS.append(directory)


def leaks_in_chunks(chunks: Iterable[bytes], tokens: Iterable[str]) -> list[str]:
    """Tokens whose raw bytes occur in any chunk (each token named once, never printed whole)."""
    needles = {token: token.encode("utf-8") for token in tokens}
    found = set()
    for chunk in chunks:
        for token, needle in needles.items():
            if token not in found and needle in chunk:
                found.add(token)
    return sorted(f"{token[:6]}... (len {len(token)})" for token in found)


def files_under(directories: Iterable[Path]) -> list[Path]:
    return sorted({path for directory in directories if directory.exists() for path in directory.rglob("*")
                   if path.is_file()})


def leaks_at_rest(directories: Iterable[Path]) -> dict[str, list[str]]:
    """Files under ``directories`` that hold the raw bytes of a token issued so far."""
    return leaks_in_files(files_under(directories), ISSUED_TOKENS)


def leaks_in_files(paths: Iterable[Path], tokens: Iterable[str]) -> dict[str, list[str]]:
    tokens = list(tokens)
    leaks = {}
    for path in paths:
        found = leaks_in_chunks([path.read_bytes()], tokens)
        if found:
            leaks[str(path)] = found
    return leaks
