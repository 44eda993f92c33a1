"""A subscription's pull against local sources (``file://`` repositories, an HTTP server on
127.0.0.1; never the internet), on a real Local store: the schedules it makes, changes and
removes, the folder it swaps, and everything that must leave both as they were (a bad URL, a
missing branch, no git, a store that fails, a cancel, a hostile repository)."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest

from edge_runtime.contract.schedules import AddScheduleCommand
from edge_runtime.contract.subscriptions import (
    AddSubscriptionCommand,
    GitMissingError,
    InvalidSubscriptionError,
    PullCancelledError,
    PullError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    SubscriptionKind,
)
from edge_runtime.local.store import LocalStore
from edge_runtime.local.subscriptions import LocalSubscriptionRepository
from edge_runtime.qinglong import subscription_source
from edge_runtime.qinglong.subscription_pull import WORK_AREA, PullGuard, PullLimits, pull
from tests.support.git_sources import Repo, http_files

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

JD_A = "/*\n15 8 * * * jd_a.js\n*/\nconst $ = new Env('京豆');\n"
JD_B = "# cron: 30 9 * * *\nprint('b')\n"


@pytest.fixture
def store(db: Any, db_path: Path, clock: Any) -> LocalStore:
    return LocalStore(db, str(db_path), clock)


@pytest.fixture
def scripts(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    path = tmp_path / "scripts"
    path.mkdir()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    yield path, fd
    os.close(fd)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    repository = Repo(tmp_path / "src")
    repository.commit({"jd_a.js": JD_A, "jd_b.py": JD_B, "util.js": "module.exports = {}\n"})
    return repository


@pytest.fixture
def signals() -> Iterator[None]:
    saved = {number: signal.getsignal(number) for number in PullGuard.SIGNALS}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


def _add(store: LocalStore, url: str, scripts_dir: Path, **fields: Any) -> str:
    kind = fields.pop("kind", SubscriptionKind.GIT)
    command = AddSubscriptionCommand(
        kind=kind, url=url, name=fields.pop("name", "test"), folder=fields.pop("folder", "sub"),
        scripts_dir=str(scripts_dir), pull_command=["edge-runtime", "subscription", "pull"],
        expression="0 4 * * *", extensions=["js", "py"], **fields)
    return store.subscriptions.add(command).id


def _pull(store: LocalStore, subscription_id: str, scripts_fd: int, lines: list[str] | None = None,
          **options: Any):
    record = store.subscriptions.get(subscription_id)
    return pull(store, record, scripts_fd, say=(lines if lines is not None else []).append, **options)


def _schedules(store: LocalStore) -> dict[str, tuple[str, bool, str | None]]:
    """Script schedules by command: (expression, paused, name); the pull schedules left out."""
    return {r.command[1]: (r.expression, r.paused, None if r.name is msgspec.UNSET else r.name)
            for r in store.schedules.list() if r.command[0] == "task"}


def _folder(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_the_first_pull_makes_paused_schedules_from_the_headers(store: LocalStore, scripts, repo: Repo) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    outcome = _pull(store, subscription_id, fd)
    assert _schedules(store) == {"sub/jd_a.js": ("15 8 * * *", True, "京豆"),
                                 "sub/jd_b.py": ("30 9 * * *", True, "jd_b.py")}
    assert set(_folder(path / "sub")) == {"jd_a.js", "jd_b.py", "util.js"}
    assert [c.kind.value for c in outcome.changes] == ["add", "add", "note"]
    record = store.subscriptions.get(subscription_id)
    assert record.revision == outcome.revision and len(outcome.revision) == 40
    assert os.listdir(path / WORK_AREA) == ["sub.lock"]  # nothing of the work left


def test_auto_add_makes_them_active(store: LocalStore, scripts, repo: Repo) -> None:
    path, fd = scripts
    _pull(store, _add(store, repo.url, path, auto_add=True), fd)
    assert {paused for _, paused, _ in _schedules(store).values()} == {False}


def test_its_scripts_schedules_get_its_user_and_its_pulls_the_services(store: LocalStore, scripts,
                                                                      repo: Repo) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path, task_user="ql", pull_user="root")
    _pull(store, subscription_id, fd)
    users = {r.command[1] if r.command[0] == "task" else "pull": r.task_user for r in store.schedules.list()}
    assert users == {"sub/jd_a.js": "ql", "sub/jd_b.py": "ql", "pull": "root"}
    plain = _add(store, repo.url, path, folder="plain")
    _pull(store, plain, fd)
    assert {r.task_user for r in store.schedules.list() if r.command[-1].startswith("plain/")} == {msgspec.UNSET}


def test_commits_that_add_remove_and_change_scripts_change_the_schedules(store: LocalStore, scripts,
                                                                          repo: Repo) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path, auto_remove=True)
    _pull(store, subscription_id, fd)
    ids = {r.command[1]: r.id for r in store.schedules.list() if r.command[0] == "task"}
    store.schedules.set_paused(ids["sub/jd_a.js"], False)  # the user's choice survives a header change
    repo.commit({"jd_a.js": JD_A.replace("15 8", "20 8"), "jd_b.py": None, "jd_c.js": "// cron: 5 5 * * *\n"})
    lines: list[str] = []
    outcome = _pull(store, subscription_id, fd, lines)
    assert [(c.kind.value, c.path) for c in outcome.changes] == [
        ("change", "jd_a.js"), ("remove", "jd_b.py"), ("add", "jd_c.js")]
    assert _schedules(store) == {"sub/jd_a.js": ("20 8 * * *", False, "京豆"),
                                 "sub/jd_c.js": ("5 5 * * *", True, "jd_c.js")}
    assert set(_folder(path / "sub")) == {"jd_a.js", "jd_c.js", "util.js"}
    again = _pull(store, subscription_id, fd, lines)
    assert again.up_to_date and lines[-1].startswith("up to date")


def test_without_auto_remove_a_removed_script_keeps_its_schedule_and_its_file(store: LocalStore, scripts,
                                                                               repo: Repo) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    _pull(store, subscription_id, fd)
    repo.commit({"jd_b.py": None})
    outcome = _pull(store, subscription_id, fd)
    assert [(c.kind.value, c.path) for c in outcome.changes] == [("keep", "jd_b.py")]
    assert "sub/jd_b.py" in _schedules(store)
    assert (path / "sub" / "jd_b.py").read_text() == JD_B


def test_filters_choose_the_scripts_and_dependence_brings_files_without_schedules(store: LocalStore, scripts,
                                                                                 repo: Repo) -> None:
    path, fd = scripts
    repo.commit({"jx_c.js": "// cron: 1 1 * * *\n", "utils/common.js": "// cron: 2 2 * * *\n",
                 "utils/data.json": "{}", "README.md": "# r\n"})
    subscription_id = _add(store, repo.url, path, whitelist="jd_|jx_", blacklist="jx_", dependence="^utils/")
    _pull(store, subscription_id, fd)
    assert set(_folder(path / "sub")) == {"jd_a.js", "jd_b.py", "utils/common.js", "utils/data.json"}
    assert set(_schedules(store)) == {"sub/jd_a.js", "sub/jd_b.py"}


def test_a_schedule_here_already_is_taken_over_not_made_twice(store: LocalStore, scripts, repo: Repo) -> None:
    path, fd = scripts
    imported = store.schedules.add(AddScheduleCommand(expression="15 8 * * *", argv=["task", "sub/jd_a.js"],
                                                      name="京豆"))
    outcome = _pull(store, _add(store, repo.url, path), fd)
    assert ("adopt", imported.id) in [(c.kind.value, c.schedule_id) for c in outcome.changes]
    assert [r.id for r in store.schedules.list() if r.command == ["task", "sub/jd_a.js"]] == [imported.id]


def test_a_schedule_removed_by_hand_stays_removed(store: LocalStore, scripts, repo: Repo) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    _pull(store, subscription_id, fd)
    store.schedules.remove(next(r.id for r in store.schedules.list() if r.command == ["task", "sub/jd_a.js"]))
    assert next(s for s in store.subscriptions.scripts(subscription_id) if s.path == "jd_a.js").schedule_id \
        is msgspec.UNSET
    repo.commit({"jd_a.js": JD_A.replace("15 8", "16 8")})
    _pull(store, subscription_id, fd)
    assert "sub/jd_a.js" not in _schedules(store)


# ----------------------------------------------------------------------------------- failures change nothing


def _state(store: LocalStore, subscription_id: str, path: Path) -> tuple[Any, ...]:
    return (store.subscriptions.get(subscription_id), store.schedules.list(),
            store.subscriptions.scripts(subscription_id), _folder(path / "sub") if (path / "sub").exists() else None)


def test_a_source_gone_a_missing_branch_and_no_git_change_nothing(store: LocalStore, scripts, repo: Repo,
                                                                    tmp_path: Path) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    _pull(store, subscription_id, fd)
    repo.commit({"jd_a.js": JD_A.replace("15 8", "20 8")})
    before = _state(store, subscription_id, path)
    empty = tmp_path / "no-git-here"
    empty.mkdir()
    with pytest.raises(GitMissingError, match="git is not installed on this device"):
        _pull(store, subscription_id, fd, environ={"PATH": str(empty)})
    assert _state(store, subscription_id, path) == before
    repo.path.rename(tmp_path / "moved")
    with pytest.raises(PullError, match="does not appear to be a git repository|not found|No such"):
        _pull(store, subscription_id, fd)
    assert _state(store, subscription_id, path) == before
    (tmp_path / "moved").rename(repo.path)
    missing = _add(store, repo.url, path, folder="other", branch="no-such-branch")
    with pytest.raises(PullError, match="no-such-branch"):
        _pull(store, missing, fd)
    assert not (path / "other").exists() and store.subscriptions.get(missing).revision is msgspec.UNSET
    assert sorted(os.listdir(path / WORK_AREA)) == ["other.lock", "sub.lock"]


def test_a_store_that_fails_to_commit_puts_the_folder_back(store: LocalStore, scripts, repo: Repo,
                                                           fail_next_commit: Any) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    _pull(store, subscription_id, fd)
    repo.commit({"jd_a.js": JD_A.replace("15 8", "20 8"), "new.js": "// cron: 1 2 * * *\n"})
    before = _state(store, subscription_id, path)
    fail_next_commit(apsw.FullError)
    with pytest.raises(Exception, match="injected"):
        _pull(store, subscription_id, fd)
    assert _state(store, subscription_id, path) == before
    assert sorted(os.listdir(path / WORK_AREA)) == ["sub.lock"]


def test_another_pull_committed_first_refuses_this_one_whole(store: LocalStore, scripts, repo: Repo) -> None:
    from edge_runtime.contract.subscriptions import PullChanges

    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    _pull(store, subscription_id, fd)
    with pytest.raises(SubscriptionConflictError, match="another pull"):
        store.subscriptions.apply_pull(PullChanges(subscription_id=subscription_id, base_revision=None,
                                                   revision="0" * 40, changes=[]))


def test_a_pull_that_died_mid_swap_is_finished_or_undone_by_the_next(store: LocalStore, scripts, repo: Repo) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    _pull(store, subscription_id, fd)
    stored = store.subscriptions.get(subscription_id).revision
    original = _folder(path / "sub")
    area = path / WORK_AREA
    # Died after both renames, before the store committed: the old folder comes back.
    shutil.copytree(path / "sub", area / "sub.old")
    (path / "sub" / "half.js").write_text("// cron: 1 1 * * *\n")
    (area / "sub.swap").write_text("f" * 40 + "\n")
    lines: list[str] = []
    _pull(store, subscription_id, fd, lines)
    assert "the previous folder is back" in " ".join(lines) and _folder(path / "sub") == original
    # Died after the commit: the new folder stays, the old one goes.
    shutil.copytree(path / "sub", area / "sub.old")
    (area / "sub.old" / "stale.js").write_text("x")
    (area / "sub.swap").write_text(stored + "\n")
    _pull(store, subscription_id, fd, lines)
    assert any("the previous pull was stored" in line for line in lines)
    assert _folder(path / "sub") == original and sorted(os.listdir(area)) == ["sub.lock"]
    # Died between the renames: the folder is put back.
    (path / "sub").rename(area / "sub.old")
    (area / "sub.swap").write_text("f" * 40 + "\n")
    _pull(store, subscription_id, fd, lines)
    assert _folder(path / "sub") == original


def test_a_second_pull_of_the_same_subscription_waits_for_nothing(store: LocalStore, scripts, repo: Repo) -> None:
    import fcntl

    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    (path / WORK_AREA).mkdir(mode=0o700)
    lock = os.open(path / WORK_AREA / "sub.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(PullError, match="another pull of sub is running"):
            _pull(store, subscription_id, fd)
    finally:
        os.close(lock)
    assert not (path / "sub").exists()


def test_a_cancel_before_the_swap_changes_nothing_and_one_during_it_is_held(
        store: LocalStore, scripts, repo: Repo, monkeypatch: pytest.MonkeyPatch, signals: None) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    guard = PullGuard()
    guard.install()
    real_fetch = subscription_source.GitSource.fetch

    def cancelled_fetch(self: Any) -> str:
        os.kill(os.getpid(), signal.SIGTERM)
        return real_fetch(self)

    monkeypatch.setattr(subscription_source.GitSource, "fetch", cancelled_fetch)
    with pytest.raises(PullCancelledError, match="SIGTERM"):
        _pull(store, subscription_id, fd, guard=guard)
    assert not (path / "sub").exists() and _schedules(store) == {}
    monkeypatch.setattr(subscription_source.GitSource, "fetch", real_fetch)
    real_apply = LocalSubscriptionRepository.apply_pull

    def cancelled_apply(self: LocalSubscriptionRepository, pulled: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        return real_apply(self, pulled)

    monkeypatch.setattr(LocalSubscriptionRepository, "apply_pull", cancelled_apply)
    _pull(store, subscription_id, fd, guard=guard)
    assert guard.held == signal.SIGTERM and len(_schedules(store)) == 2


# ----------------------------------------------------------------------------------- hostile sources


def test_a_hostile_repository_brings_no_link_no_hook_and_no_huge_file(store: LocalStore, scripts, repo: Repo,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path, fd = scripts
    secret = tmp_path / "secret"
    secret.write_text("root's")
    repo.commit({"..js": "// cron: 1 1 * * *\n", "...": "x", "-rf.js": "// cron: 2 2 * * *\n",
                 "big.js": "// cron: 3 3 * * *\n" + "x" * 5000,
                 "hooks/post-checkout": "#!/bin/sh\ntouch HOOKED\n"},
                links={"passwd.js": "/etc/passwd", "up.js": "../../secret", "dir": "/etc"})
    # The user's and the device's git configuration try to run a hook at every ref update.
    marker = tmp_path / "HOOKED"
    hooks = tmp_path / "evil-hooks"
    hooks.mkdir()
    for name in ("reference-transaction", "post-checkout", "post-merge"):
        hook = hooks / name
        hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
        hook.chmod(0o755)
    evil_home = tmp_path / "home"
    evil_home.mkdir()
    (evil_home / ".gitconfig").write_text(f"[core]\n\thooksPath = {hooks}\n[init]\n\ttemplateDir = {tmp_path}\n")
    environ = {"PATH": os.environ["PATH"], "HOME": str(evil_home), "GIT_CONFIG_GLOBAL": str(evil_home / ".gitconfig"),
               "GIT_CONFIG_PARAMETERS": f"'core.hooksPath'='{hooks}'", "GIT_DIR": str(tmp_path)}
    monkeypatch.setattr(subscription_source, "MAX_FILE_BYTES", 4096)
    outcome = _pull(store, _add(store, repo.url, path), fd, environ=environ)
    assert not marker.exists()
    skipped = dict(outcome.skipped)
    assert skipped["passwd.js"] == skipped["up.js"] == skipped["dir"] == "a symbolic link: never made, not copied"
    assert "larger than" in skipped["big.js"]
    folder = path / "sub"
    assert sorted(os.listdir(folder)) == ["-rf.js", "..js", "jd_a.js", "jd_b.py", "util.js"]
    assert not any(p.is_symlink() for p in folder.rglob("*"))
    assert {"sub/..js", "sub/-rf.js"} <= set(_schedules(store))


@pytest.mark.parametrize("name", ["..", ".git", ".GIT"])
def test_a_tree_naming_dot_dot_or_dot_git_is_refused_by_git_and_changes_nothing(store: LocalStore, scripts,
                                                                                repo: Repo, name: str) -> None:
    path, fd = scripts
    subscription_id = _add(store, repo.url, path)
    _pull(store, subscription_id, fd)
    before = _state(store, subscription_id, path)
    repo.commit_tree([("100644", name, b"evil"), ("100644", "jd_a.js", JD_A.encode())])
    with pytest.raises(PullError, match="fsck|hasDot"):
        _pull(store, subscription_id, fd)
    assert _state(store, subscription_id, path) == before


def test_a_clone_larger_than_its_bound_is_stopped(store: LocalStore, scripts, repo: Repo) -> None:
    path, fd = scripts
    repo.commit({"blob.js": os.urandom(200_000)})
    with pytest.raises(PullError, match="grew past"):
        _pull(store, _add(store, repo.url, path), fd, limits=PullLimits(max_fetch_bytes=50_000))
    assert not (path / "sub").exists()


def test_too_many_files_are_refused_before_anything_is_written(store: LocalStore, scripts, repo: Repo) -> None:
    path, fd = scripts
    with pytest.raises(PullError, match="more than 2"):
        _pull(store, _add(store, repo.url, path), fd, limits=PullLimits(max_files=2))
    assert not (path / "sub").exists()


# ----------------------------------------------------------------------------------- one file


@pytest.mark.parametrize("transport", ["curl", "wget"])
def test_a_raw_file_is_downloaded_and_scheduled(store: LocalStore, scripts, transport: str) -> None:
    if shutil.which(transport) is None:
        pytest.skip(f"no {transport}")
    path, fd = scripts
    files = {"/o/r/main/jd_x.js": b"// 0 7 * * * jd_x.js\nconst $ = new Env('X');\n"}
    with http_files(files) as base:
        subscription_id = _add(store, f"{base}/o/r/main/jd_x.js", path, kind=SubscriptionKind.FILE, folder="main_jd_x")
        first = _pull(store, subscription_id, fd, source_options={"transports": (transport,)})
        assert first.revision.startswith("sha256:")
        assert _schedules(store) == {"main_jd_x/jd_x.js": ("0 7 * * *", True, "X")}
        again = _pull(store, subscription_id, fd, source_options={"transports": (transport,)})
        assert again.up_to_date
        files["/o/r/main/jd_x.js"] = b"// 0 8 * * * jd_x.js\nconst $ = new Env('X');\n"
        _pull(store, subscription_id, fd, source_options={"transports": (transport,)})
        assert _schedules(store) == {"main_jd_x/jd_x.js": ("0 8 * * *", True, "X")}
        del files["/o/r/main/jd_x.js"]
        with pytest.raises(PullError, match=f"{transport} could not download"):
            _pull(store, subscription_id, fd, source_options={"transports": (transport,)})
    assert (path / "main_jd_x" / "jd_x.js").read_bytes().startswith(b"// 0 8")


@pytest.mark.parametrize("transport", ["curl", "wget"])
def test_a_raw_file_larger_than_its_bound_changes_nothing(store: LocalStore, scripts, transport: str) -> None:
    if shutil.which(transport) is None:
        pytest.skip(f"no {transport}")
    path, fd = scripts
    with http_files({"/big.js": b"x" * 10_000}) as base:
        subscription_id = _add(store, f"{base}/big.js", path, kind=SubscriptionKind.FILE)
        with pytest.raises(PullError, match="larger than 1.0 KiB"):
            _pull(store, subscription_id, fd, source_options={"max_bytes": 1000, "transports": (transport,)})
    assert not (path / "sub").exists()


def test_nothing_to_download_with_says_so(store: LocalStore, scripts) -> None:
    path, fd = scripts
    subscription_id = _add(store, "https://127.0.0.1:9/x.js", path, kind=SubscriptionKind.FILE)
    with pytest.raises(PullError, match="nothing on this device downloads"):
        _pull(store, subscription_id, fd, source_options={"transports": ("no-such-tool",)})


# ----------------------------------------------------------------------------------- the store


def test_a_folder_is_one_subscriptions_and_remove_keeps_or_purges_its_schedules(store: LocalStore, scripts,
                                                                                 repo: Repo) -> None:
    path, fd = scripts
    first = _add(store, repo.url, path)
    with pytest.raises(InvalidSubscriptionError, match="the folder 'sub' is subscription"):
        _add(store, repo.url, path)
    _pull(store, first, fd)
    pull_schedule = store.subscriptions.get(first).schedule_id
    removed = store.subscriptions.remove(first, purge=False)
    assert removed.removed_schedule_ids == [pull_schedule] and len(removed.kept_schedule_ids) == 2
    assert len(_schedules(store)) == 2 and store.subscriptions.list() == []
    second = _add(store, repo.url, path, folder="sub2")
    _pull(store, second, fd)
    removed = store.subscriptions.remove(second, purge=True)
    assert len(removed.removed_schedule_ids) == 3 and removed.kept_schedule_ids == []
    assert len(_schedules(store)) == 2  # the first one's, kept


def test_its_pull_schedule_removed_by_hand_leaves_the_subscription(store: LocalStore, scripts, repo: Repo) -> None:
    path, _ = scripts
    subscription_id = _add(store, repo.url, path)
    store.schedules.remove(store.subscriptions.get(subscription_id).schedule_id)
    assert store.subscriptions.get(subscription_id).schedule_id is msgspec.UNSET


def test_pulls_are_never_scheduled_by_a_program_another_user_can_change(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_runtime.cli.pull_command import this_program

    shared = tmp_path / "shared"
    shared.mkdir()
    program = shared / "edge-runtime"
    program.write_text("#!/bin/sh\n")
    monkeypatch.setattr("sys.argv", [str(program)])
    assert this_program() == [str(program)]
    shared.chmod(0o777)  # anyone may replace it: root's service would run their program at every pull
    with pytest.raises(InvalidSubscriptionError, match="refusing to schedule pulls by"):
        this_program()
    shared.chmod(0o755)
    program.chmod(0o666)
    with pytest.raises(InvalidSubscriptionError, match="writable by others"):
        this_program()


@pytest.mark.parametrize(("url", "allowed"), [("https://example.invalid/a/b.git", "https"),
                                              ("git://example.invalid/a/b.git", "git"),
                                              ("file:///srv/b.git", "file")])
def test_git_gets_only_the_urls_transport_and_nothing_of_the_environment(store: LocalStore, scripts, tmp_path: Path,
                                                                         url: str, allowed: str) -> None:
    path, _ = scripts
    record = store.subscriptions.get(_add(store, url, path))
    environ = {"PATH": os.environ["PATH"], "GIT_CONFIG_PARAMETERS": "'core.hooksPath'='/x'", "GIT_DIR": "/x",
               "LD_PRELOAD": "/x.so", "https_proxy": "http://proxy.invalid:3128"}
    source = subscription_source.GitSource(record, str(tmp_path), environ)
    assert source.env["GIT_ALLOW_PROTOCOL"] == allowed  # an https pull is never redirected to plain http
    assert source.env["https_proxy"] == "http://proxy.invalid:3128"
    assert not {"GIT_CONFIG_PARAMETERS", "GIT_DIR", "LD_PRELOAD"} & set(source.env)
    assert source.env["HOME"] == str(tmp_path / "home") and source.env["GIT_CONFIG_NOSYSTEM"] == "1"


def test_a_git_without_its_https_transport_says_which_package_is_missing(store: LocalStore, scripts,
                                                                         tmp_path: Path) -> None:
    path, fd = scripts
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"  # what OpenWrt's git says without the git-http package
    fake.write_text("#!/bin/sh\necho \"git: 'remote-https' is not a git command. See 'git --help'.\" >&2\nexit 1\n")
    fake.chmod(0o755)
    subscription_id = _add(store, "https://example.invalid/a/b.git", path)
    with pytest.raises(GitMissingError, match="no http\\(s\\) transport \\(OpenWrt: opkg install git-http\\)"):
        _pull(store, subscription_id, fd, environ={"PATH": str(bin_dir)})
    assert not (path / "sub").exists()


def test_subscriptions_are_numbered_in_order_and_a_removed_number_is_never_given_again(store: LocalStore,
                                                                                      scripts, repo: Repo) -> None:
    first = _add(store, repo.url, scripts[0], folder="one")
    second = _add(store, repo.url, scripts[0], folder="two")
    assert [store.subscriptions.get(i).number for i in (first, second)] == [1, 2]
    store.subscriptions.remove(second, purge=False)
    third = _add(store, repo.url, scripts[0], folder="three")
    assert store.subscriptions.get(third).number == 3
    assert store.subscriptions.get_by_number(1).id == first
    with pytest.raises(SubscriptionNotFoundError):
        store.subscriptions.get_by_number(2)
