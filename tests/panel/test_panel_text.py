"""The page's one catalogue (edge_runtime/panel/static/text.js): every key the page uses has a
zh-CN and an English text with the same placeholders, the Chinese shows no English word but
unit symbols, and every error code the runtime or the panel's gate can answer has a text (its
own, or its family's, as the page picks it)."""

from __future__ import annotations

import json
import re

import pytest
from tests.support.panel_text import ALLOWED_IN_CHINESE, LANGUAGES, STATIC, catalogue, entries

from edge_runtime.contract.panel_apps import AppScope
from edge_runtime.contract.runs import AttemptStatus, RunStatus

PACKAGE = STATIC.parents[1]
#: Keys whose Chinese text is not Chinese on purpose: the switch names the other language.
OTHER_LANGUAGE_KEYS = frozenset({"otherLang"})
WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _script() -> str:
    return (STATIC / "panel.js").read_text(encoding="utf-8")


def test_every_key_has_both_texts_with_the_same_placeholders() -> None:
    every = entries()
    assert len(every) > 150
    for key, texts in every.items():
        assert len(texts) == 2 and all(t.strip() for t in texts), key
        assert sorted(PLACEHOLDER.findall(texts[0])) == sorted(PLACEHOLDER.findall(texts[1])), key


def test_the_chinese_texts_show_no_english_word() -> None:
    found = {key: words for key, text in catalogue("zh-CN").items() if key not in OTHER_LANGUAGE_KEYS
             and (words := [w for w in WORD.findall(PLACEHOLDER.sub("", text)) if w not in ALLOWED_IN_CHINESE])}
    assert found == {}


def test_the_check_would_catch_english() -> None:
    assert WORD.findall("下次 Next fire") == ["Next", "fire"] and WORD.findall("30s、5m、1h 毫秒") == []


def test_every_key_the_page_uses_is_in_the_catalogue() -> None:
    keys = set(entries())
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    used = set(re.findall(r'data-i18n(?:-ph)?="([\w.]+)"', page))
    script = _script()
    used |= set(re.findall(r'\b(?:t|rich|button)\("([\w.]+)"', script))  # t("key"), button("key", act, ...)
    used |= set(re.findall(r'\bopenForm\("[\w-]+", "([\w.]+)"', script))
    used |= set(re.findall(r'\bdraw\("[\w-]+", \w+, "([\w.]+)"', script))
    health = script[script.index("function drawHealth"):]
    used |= set(re.findall(r'\["(\w+)", ', health[:health.index("\n  }\n")]))  # the device's rows: t(row[0])
    used = {key for key in used if not key.endswith(".")}  # t("rs." + status): listed below
    used |= {f"rs.{s.value}" for s in (*RunStatus, *AttemptStatus)} | {f"sc.{s.value}" for s in AppScope}
    used |= {f"cs.{s}" for s in ("enabled", "disabled", "running")}
    assert len(used) > 100
    assert used - keys == set()


def test_every_check_the_device_runs_has_a_name_in_both_languages() -> None:
    source = (PACKAGE / "local" / "health.py").read_text(encoding="utf-8")
    names = set(re.findall(r'(?:_guarded|HealthCheck)\("([a-z_]+)"', source))
    names |= set(re.findall(r'^    \("([a-z_]+_invariants)"', source, re.MULTILINE))
    assert {"integrity", "migrations", "dispatch_invariants"} <= names
    assert {f"chk.{name}" for name in names} - set(entries()) == set()


def _declared_codes() -> set[str]:
    codes = set()
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        codes |= set(re.findall(r'code="([A-Z_]+)"', source))
        codes |= set(re.findall(r'Refusal\(\d+, "([A-Z_]+)"', source))
        codes |= set(re.findall(r'_error_body\("([A-Z_]+)"', source))
    return codes


def _text_of_code(code: str) -> str:
    """The page's rule (panel.js, errorText): the code's own text, else its family's, else ef.OTHER."""
    chinese = catalogue("zh-CN")
    families = json.loads(re.search(r"ERROR_FAMILIES = (\[.*?\]);", _script()).group(1))
    if f"e.{code}" in chinese:
        return chinese[f"e.{code}"]
    family = next((f for f in families if f in code), "OTHER")
    return chinese[f"ef.{family}"]


def test_every_error_code_has_a_text_of_its_own_or_of_its_family() -> None:
    codes = _declared_codes()
    assert {"LOGIN_FAILED", "RUN_NOT_FOUND", "CSRF_REFUSED", "INTERNAL", "ENV_ENTRY_NOT_FOUND"} <= codes
    families = json.loads(re.search(r"ERROR_FAMILIES = (\[.*?\]);", _script()).group(1))
    assert {f"ef.{f}" for f in [*families, "OTHER"]} <= set(catalogue("zh-CN"))
    assert all(_text_of_code(code) for code in codes)


@pytest.mark.parametrize("code", [
    # What a panel user meets: the gate's refusals and the refusals of the pages' forms.
    "LOGIN_FAILED", "AUTH_THROTTLED", "UNAUTHENTICATED", "CSRF_REFUSED", "WRONG_HOST", "NOT_FOUND", "BAD_QUERY",
    "BODY_TOO_LARGE", "REQUEST_TIMEOUT", "INTERNAL", "INVALID_REQUEST", "INVALID_CRON_EXPRESSION", "INVALID_TIME_ZONE",
    "SCHEDULE_NEVER_FIRES", "SCHEDULE_RUN_SKIPPED", "INVALID_RUN_COMMAND", "INVALID_SCHEDULE_COMMAND",
    "INVALID_DURATION", "INVALID_NAME", "INVALID_VARIABLE", "SECRET_TOO_SHORT", "ENV_ENTRY_NOT_FOUND",
    "RUN_NOT_FOUND", "SCHEDULE_NOT_FOUND", "SUBSCRIPTION_NOT_FOUND", "RUN_STATE_CONFLICT", "COMMAND_NOT_STARTED",
    "TASK_SCRIPT_NOT_FOUND", "PANEL_APP_EXISTS", "PANEL_APP_LIMIT", "INVALID_PANEL_APP",
])
def test_the_errors_a_panel_user_meets_have_texts_of_their_own(code) -> None:
    assert code in _declared_codes()
    for language in LANGUAGES:
        assert catalogue(language).get(f"e.{code}"), (code, language)
