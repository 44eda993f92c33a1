"""Subscriptions: a source of scripts (a git repository, or one file at a URL) pulled on its own
schedule into its own folder of the scripts directory, whose scripts get schedules from their
headers (docs/qinglong.md, "Subscriptions").

A subscription is a record and a schedule of its own (its *pull schedule*): the pull schedule
fires a Run whose command is this program's ``subscription pull ID``, so a pull has its log, its
cancel and its timeout as any Run does. What a pull changes in the schedules is decided here,
once (:func:`plan_script_changes`, pure), and applied by the store in one transaction
(:class:`SubscriptionStore`): a new script whose header has a schedule gets one (paused unless
the subscription auto-adds), a removed script's schedule is removed when it auto-removes, a
changed header changes its schedule. Fetching, filtering and reading the headers belong to the
face that pulls (``edge_runtime/qinglong/``); nothing here does I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Protocol

import msgspec

from edge_runtime.contract.cron import parse_schedule
from edge_runtime.contract.errors import EdgeRuntimeError
from edge_runtime.contract.runs import MAX_NAME_LENGTH, TimeoutMs, argv_problem, task_user_problem
from edge_runtime.contract.time_zones import time_zone_text
from edge_runtime.contract.validation import (
    MAX_SAFE_INTEGER, Command, SafeInt, identifier_problem, identifier_type, int_problem,
)

SUBSCRIPTION_ID_MAX_LENGTH = 36
MAX_URL_LENGTH = 2048
#: A whitelist, blacklist or dependence pattern, at most (an extended regular expression).
MAX_PATTERN_LENGTH = 1024
MAX_FOLDER_LENGTH = 64
MAX_BRANCH_LENGTH = 255
MAX_EXTENSIONS = 32
#: A script's path inside its subscription's folder, at most.
MAX_SCRIPT_PATH_LENGTH = 1024
#: A revision: a git commit id (40 or 64 hex digits), or ``sha256:`` and a file's digest.
MAX_REVISION_LENGTH = 80

_FOLDER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_BRANCH = re.compile(r"[A-Za-z0-9._/+-]+")
_EXTENSION = re.compile(r"[A-Za-z0-9]{1,16}")
_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")


class SubscriptionKind(enum.StrEnum):
    """What a subscription pulls."""

    GIT = "git"  # a public git repository: its branch's newest commit
    FILE = "file"  # one file at an http(s) URL


#: The URL schemes each kind pulls. ``file://`` is a local repository, given on purpose (tests,
#: a mirror on a USB disk); ssh and the scp form need keys and host keys: not pulled.
URL_SCHEMES: dict[SubscriptionKind, tuple[str, ...]] = {
    SubscriptionKind.GIT: ("https", "http", "git", "file"),
    SubscriptionKind.FILE: ("https", "http"),
}
#: Schemes whose bytes anyone on the network path can change (said when a subscription is added).
UNENCRYPTED_SCHEMES = ("http", "git")


class SubscriptionError(EdgeRuntimeError, code="SUBSCRIPTION_ERROR"):
    """Base of every subscription error."""


class InvalidSubscriptionError(SubscriptionError, code="INVALID_SUBSCRIPTION"):
    """The subscription request is malformed (URL, folder, branch, pattern, schedule, user): fix
    the input; nothing was stored."""


class SubscriptionNotFoundError(SubscriptionError, code="SUBSCRIPTION_NOT_FOUND"):
    """No subscription has this id."""


class AmbiguousSubscriptionIdError(SubscriptionError, code="SUBSCRIPTION_ID_AMBIGUOUS"):
    """A short id form matches several subscriptions; the message names them."""


class SubscriptionConflictError(SubscriptionError, code="SUBSCRIPTION_CONFLICT"):
    """The subscription changed while a pull planned its changes (another pull committed first,
    or it was removed): nothing of this pull was stored."""


class SubscriptionRepositoryError(SubscriptionError, code="SUBSCRIPTION_REPOSITORY_FAILED"):
    """The store could not read or write the subscription."""


class PullError(SubscriptionError, code="SUBSCRIPTION_PULL_FAILED"):
    """A pull failed (the source could not be fetched, or is refused); nothing was changed: not
    the folder, not the schedules."""


class GitMissingError(PullError, code="SUBSCRIPTION_GIT_MISSING"):
    """The device has no ``git`` (or no git for http(s)): a repository cannot be pulled."""


class PullCancelledError(PullError, code="SUBSCRIPTION_PULL_CANCELLED"):
    """The pull was cancelled (its Run's cancel, its timeout) before it changed anything."""


def url_problem(kind: SubscriptionKind, url: object) -> str | None:
    """Why ``url`` is not one a subscription of ``kind`` pulls, or None."""
    if type(url) is not str or not url:
        return "the URL must be a non-empty string"
    if len(url) > MAX_URL_LENGTH:
        return f"the URL is longer than {MAX_URL_LENGTH} characters"
    if _CONTROL.search(url):
        return "the URL holds a blank or a control character"
    if not url.isascii():
        return "the URL must be ASCII: percent-encode its path, and give a host's ASCII (xn--) form"
    scheme, sep, rest = url.partition("://")
    allowed = URL_SCHEMES[kind]
    if not sep or scheme.lower() not in allowed:
        return (f"a {kind.value} subscription pulls {', '.join(s + '://' for s in allowed)} URLs only (public "
                f"repositories; ssh and user@host:path need keys this device does not keep)")
    if scheme.lower() == "file":
        if not rest.startswith("/"):
            return "a file:// URL names an absolute path (file:///srv/repo.git)"
    elif not rest or rest.startswith("/"):
        return "the URL names no host"
    if "@" in rest.split("/", 1)[0]:
        return "the URL holds a user name or password: a subscription pulls public sources only"
    return None


def folder_problem(folder: object) -> str | None:
    """Why ``folder`` cannot be a subscription's folder (one name inside the scripts directory)."""
    if type(folder) is not str or not _FOLDER.fullmatch(folder) or len(folder) > MAX_FOLDER_LENGTH:
        return (f"the folder must be one name of letters, digits, '.', '_' and '-', not starting with '.' or '-', "
                f"at most {MAX_FOLDER_LENGTH} characters")
    return None


def branch_problem(branch: object) -> str | None:
    """Why ``branch`` is not a branch (or tag) name git takes from a subscription (never an option)."""
    if type(branch) is not str or not _BRANCH.fullmatch(branch) or len(branch) > MAX_BRANCH_LENGTH:
        return "the branch must be letters, digits and . _ / + - only"
    if branch.startswith(("-", "/", ".")) or branch.endswith(("/", ".", ".lock")) or ".." in branch \
            or "//" in branch or "/." in branch:
        return f"{branch!r} is not a branch name git accepts"
    return None


def pattern_problem(field: str, pattern: object) -> str | None:
    """Why a whitelist/blacklist/dependence ``pattern`` is not a regular expression, or None."""
    if type(pattern) is not str or not pattern or len(pattern) > MAX_PATTERN_LENGTH:
        return f"the {field} must be a regular expression of 1 to {MAX_PATTERN_LENGTH} characters"
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"the {field} {pattern!r} is not a regular expression: {exc}"
    return None


def check_subscription_id(subscription_id: object) -> None:
    problem = identifier_problem("subscription_id", subscription_id, SUBSCRIPTION_ID_MAX_LENGTH)
    if problem is not None:
        raise InvalidSubscriptionError(problem)


def check_subscription_number(number: object) -> None:
    problem = int_problem("a subscription's number", number, 1, MAX_SAFE_INTEGER)
    if problem is not None:
        raise InvalidSubscriptionError(problem)


Pattern = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PATTERN_LENGTH)]


class AddSubscriptionCommand(Command, kw_only=True):
    """A new subscription and its pull schedule (``expression``, in ``time_zone``), added in one
    transaction; the pull schedule runs ``pull_command`` followed by the new subscription's id."""

    error = InvalidSubscriptionError

    kind: SubscriptionKind
    url: str
    name: identifier_type(MAX_NAME_LENGTH)
    #: Its folder's name inside ``scripts_dir``: unique among the subscriptions.
    folder: str
    #: The scripts directory (absolute) its folder is in, as the device resolved it when added.
    scripts_dir: str
    pull_command: list[str]
    expression: str
    time_zone: str | msgspec.UnsetType = msgspec.UNSET
    #: The pull's own timeout (a pull is a Run): cancelled with reason ``timeout`` past it.
    timeout_ms: TimeoutMs | msgspec.UnsetType = msgspec.UNSET
    branch: str | msgspec.UnsetType = msgspec.UNSET
    whitelist: Pattern | msgspec.UnsetType = msgspec.UNSET
    blacklist: Pattern | msgspec.UnsetType = msgspec.UNSET
    dependence: Pattern | msgspec.UnsetType = msgspec.UNSET
    #: The file extensions (without the dot) whose files are scripts.
    extensions: list[str]
    auto_add: bool = False
    auto_remove: bool = False
    #: The user its scripts run as: given to the schedules it makes for them.
    task_user: str | msgspec.UnsetType = msgspec.UNSET
    #: The user its pulls run as: the service's own (a pull writes the scripts directory and the
    #: database), named on its pull schedule so that the ``task_user`` setting never applies to it.
    pull_user: str | msgspec.UnsetType = msgspec.UNSET
    #: Its pull schedule added paused, in the same transaction (an imported disabled subscription).
    paused: bool = False

    def rule_problem(self) -> str | None:
        for problem in (url_problem(self.kind, self.url), folder_problem(self.folder)):
            if problem is not None:
                return problem
        if not self.scripts_dir.startswith("/") or _CONTROL.search(self.scripts_dir.replace(" ", "")):
            return "the scripts directory must be an absolute path"
        problem = argv_problem(self.pull_command)
        if problem is not None:
            return f"the pull command: {problem}"
        parse_schedule(self.expression)  # InvalidCronExpressionError names the field and the reason
        if self.time_zone is not msgspec.UNSET:
            time_zone_text(self.time_zone)
        if self.branch is not msgspec.UNSET:
            if self.kind is SubscriptionKind.FILE:
                return "a file subscription has no branch"
            problem = branch_problem(self.branch)
            if problem is not None:
                return problem
        for field in ("whitelist", "blacklist", "dependence"):
            value = getattr(self, field)
            if value is not msgspec.UNSET:
                problem = pattern_problem(field, value)
                if problem is not None:
                    return problem
        if not self.extensions or len(self.extensions) > MAX_EXTENSIONS or not all(
                type(e) is str and _EXTENSION.fullmatch(e) for e in self.extensions):
            return f"the extensions must be 1 to {MAX_EXTENSIONS} names of letters and digits (js py)"
        for user in (self.task_user, self.pull_user):
            if user is not msgspec.UNSET:
                problem = task_user_problem(user)
                if problem is not None:
                    return problem
        return None


class SubscriptionRecord(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False,
                         kw_only=True):
    id: str
    #: A small whole number given when it is added, never reused (QingLong's clients name a
    #: subscription by it).
    number: SafeInt
    name: str
    kind: SubscriptionKind
    url: str
    folder: str
    scripts_dir: str
    branch: str | msgspec.UnsetType = msgspec.UNSET
    whitelist: str | msgspec.UnsetType = msgspec.UNSET
    blacklist: str | msgspec.UnsetType = msgspec.UNSET
    dependence: str | msgspec.UnsetType = msgspec.UNSET
    extensions: list[str]
    auto_add: bool
    auto_remove: bool
    task_user: str | msgspec.UnsetType = msgspec.UNSET
    #: Its pull schedule; unset once that schedule was removed by hand (then it is pulled only by
    #: ``subscription run``).
    schedule_id: str | msgspec.UnsetType = msgspec.UNSET
    #: What its folder holds: the commit (git) or ``sha256:<digest>`` (file) of its last pull.
    revision: str | msgspec.UnsetType = msgspec.UNSET
    pulled_at_ms: SafeInt | msgspec.UnsetType = msgspec.UNSET
    created_at_ms: SafeInt
    updated_at_ms: SafeInt


class SubscriptionScript(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True, gc=False,
                         kw_only=True):
    """A script a subscription brought, as its last pull read it: its path in the folder, its
    header's name and schedule expression (unset: none in the header), and the schedule it has
    (unset: none made, or removed by hand: the next pulls leave it so)."""

    path: str
    name: str
    expression: str | msgspec.UnsetType = msgspec.UNSET
    schedule_id: str | msgspec.UnsetType = msgspec.UNSET


class FoundScript(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """A script a pull found: its path in the folder, its header's name and expression (None: no
    valid schedule in its header), and the command that runs it."""

    path: str
    name: str
    expression: str | None
    command: list[str]


class ChangeKind(enum.StrEnum):
    ADD = "add"  # a new schedule (paused unless the subscription auto-adds)
    ADOPT = "adopt"  # an existing schedule with the same name, command and expression becomes the script's
    CHANGE = "change"  # the header's name or expression changed: the schedule follows
    REMOVE = "remove"  # the script is gone and the subscription auto-removes: its schedule goes
    KEEP = "keep"  # the script is gone upstream, its schedule stays (no auto-remove): the file is kept
    NOTE = "note"  # the script's header is recorded (new, or changed, with no schedule to change)
    FORGET = "forget"  # the script is gone and has no schedule: forgotten


class ScriptChange(msgspec.Struct, rename="camel", frozen=True, gc=False, kw_only=True):
    """One change a pull makes for one script (``kind``): the header as read now (``name``,
    ``expression``), the schedule it concerns, and for ``add`` whether it is made paused."""

    kind: ChangeKind
    path: str
    name: str
    expression: str | None = None
    command: list[str] = msgspec.field(default_factory=list)
    schedule_id: str | None = None
    paused: bool = False
    #: For ``change``: what the schedule had (the header's previous name and expression).
    before_name: str | None = None
    before_expression: str | None = None


class PullChanges(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """What one pull stores, in one transaction: the script changes and the revision the folder
    now holds. ``base_revision`` is the revision the pull planned against (None: never pulled):
    the store refuses the whole when the subscription's is another by then."""

    subscription_id: str
    base_revision: str | None
    revision: str
    changes: list[ScriptChange]


def plan_script_changes(known: Iterable[SubscriptionScript], found: Iterable[FoundScript], *, auto_add: bool,
                        auto_remove: bool, adoptable: Mapping[str, str] | None = None) -> list[ScriptChange]:
    """The changes a pull makes, from the scripts the subscription knows (``known``, as its last
    pull left them) and the ones this pull found (``found``), in path order.

    - a new script whose header has a schedule gets one, paused unless ``auto_add``; or, when
      ``adoptable`` names a schedule for its path (one already here with the same name, command
      and expression, belonging to no script), that one becomes its;
    - a known script whose header changed: its schedule takes the new expression and name; one
      whose header lost its schedule keeps its schedule as it is; one that had no schedule gets
      one when its header gains one (a schedule removed by hand is never made again);
    - a script gone (upstream, or no longer passing the filters): its schedule is removed when
      ``auto_remove``, else kept with its file; one without a schedule is forgotten.
    """
    adoptable = adoptable or {}
    known_by_path = {script.path: script for script in known}
    found_by_path = {script.path: script for script in found}
    changes: list[ScriptChange] = []
    for path in sorted(known_by_path.keys() | found_by_path.keys()):
        before, now = known_by_path.get(path), found_by_path.get(path)
        if now is None:  # known (the union's other half): gone from this pull
            before = known_by_path[path]
            if before.schedule_id is msgspec.UNSET:
                changes.append(ScriptChange(kind=ChangeKind.FORGET, path=path, name=before.name))
            elif auto_remove:
                changes.append(ScriptChange(kind=ChangeKind.REMOVE, path=path, name=before.name,
                                            schedule_id=before.schedule_id))
            else:
                changes.append(ScriptChange(kind=ChangeKind.KEEP, path=path, name=before.name,
                                            schedule_id=before.schedule_id))
            continue
        old_expression = None if before is None or before.expression is msgspec.UNSET else before.expression
        if before is None or (before.schedule_id is msgspec.UNSET and old_expression is None):
            # New, or known without a schedule in its header until now.
            if now.expression is None:
                if before is None or before.name != now.name:
                    changes.append(ScriptChange(kind=ChangeKind.NOTE, path=path, name=now.name))
            elif path in adoptable:
                changes.append(ScriptChange(kind=ChangeKind.ADOPT, path=path, name=now.name,
                                            expression=now.expression, command=now.command,
                                            schedule_id=adoptable[path]))
            else:
                changes.append(ScriptChange(kind=ChangeKind.ADD, path=path, name=now.name, expression=now.expression,
                                            command=now.command, paused=not auto_add))
            continue
        if before.name == now.name and old_expression == now.expression:
            continue
        if before.schedule_id is msgspec.UNSET or now.expression is None:
            # A schedule removed by hand stays removed; a header that lost its schedule leaves the
            # schedule as it is: only the header is recorded.
            changes.append(ScriptChange(kind=ChangeKind.NOTE, path=path, name=now.name, expression=now.expression,
                                        before_name=before.name, before_expression=old_expression))
            continue
        changes.append(ScriptChange(kind=ChangeKind.CHANGE, path=path, name=now.name, expression=now.expression,
                                    command=now.command, schedule_id=before.schedule_id, before_name=before.name,
                                    before_expression=old_expression))
    return changes


class RemovedSubscription(msgspec.Struct, rename="camel", frozen=True, gc=False, kw_only=True):
    """What ``subscription remove`` removed: the subscription, its pull schedule, and (``purge``)
    its scripts' schedules; ``kept_schedule_ids``: its scripts' schedules left as schedules of
    their own."""

    id: str
    folder: str
    scripts_dir: str
    removed_schedule_ids: list[str]
    kept_schedule_ids: list[str]


class SubscriptionStore(Protocol):
    """The subscriptions' port (Local only: docs/architecture.md says why). Each change is one
    transaction; the schedules it makes are the store's schedules, as ``schedule add`` makes them.

    Raises (all): SubscriptionNotFoundError; InvalidSubscriptionError; SubscriptionRepositoryError.
    """

    def add(self, cmd: AddSubscriptionCommand) -> SubscriptionRecord:
        """The subscription and its pull schedule, in one transaction.

        Raises:
            InvalidSubscriptionError: its folder is another subscription's.
        """
        ...

    def get(self, subscription_id: str) -> SubscriptionRecord: ...
    def get_by_number(self, number: int) -> SubscriptionRecord: ...
    def find_subscription_ids(self, form: str, limit: int) -> list[str]:
        """Ids of the subscriptions whose id begins or ends with ``form``, at most ``limit``."""
        ...
    def list(self) -> list[SubscriptionRecord]: ...
    def scripts(self, subscription_id: str) -> list[SubscriptionScript]: ...

    def apply_pull(self, pull: PullChanges) -> list[ScriptChange]:
        """Store a pull's changes and revision in one transaction; the changes as applied (an
        ``add`` with the new schedule's id; a change whose schedule was removed meanwhile
        becomes a ``note``).

        Raises:
            SubscriptionConflictError: its revision is no longer ``pull.base_revision``; nothing stored.
        """
        ...

    def remove(self, subscription_id: str, *, purge: bool) -> RemovedSubscription:
        """Remove the subscription and its pull schedule; with ``purge`` its scripts' schedules too."""
        ...
