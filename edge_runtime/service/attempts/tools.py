"""What every part of the supervisor works with, handed to each as one value.

None of it is a part's own state: the Run port of the store, this service's worker session, the
process controller and the journal are the service's; the registry of watched Attempts is read
by every part and changed by ``exits`` only.
"""

from __future__ import annotations

from typing import NamedTuple

from edge_runtime.contract.ports import RunStore
from edge_runtime.service.attempts.running import Watched
from edge_runtime.service.controller import LocalProcessController
from edge_runtime.service.journal import Journal
from edge_runtime.service.worker import WorkerSession


class Tools(NamedTuple):
    runs: RunStore
    worker: WorkerSession
    controller: LocalProcessController
    journal: Journal
    watched: Watched
