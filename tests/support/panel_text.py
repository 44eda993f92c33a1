"""The panel's catalogue of texts (edge_runtime/panel/static/text.js) as the tests read it."""

from __future__ import annotations

import json
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "edge_runtime" / "panel" / "static"
LANGUAGES = ("zh-CN", "en")
#: What a Chinese screen may show in Latin letters besides the device's own data: unit symbols.
ALLOWED_IN_CHINESE = frozenset({"KiB", "MiB"})


def entries() -> dict[str, list[str]]:
    """Every key with its zh-CN and its English text."""
    source = (STATIC / "text.js").read_text(encoding="utf-8")
    return json.loads(source[source.index("=", source.index("var PANEL_TEXT")) + 1:].strip().rstrip(";"))


def catalogue(language: str) -> dict[str, str]:
    """Every key's text in ``language`` (zh-CN or en)."""
    index = LANGUAGES.index(language)
    return {key: texts[index] for key, texts in entries().items()}
