"""Starting, watching and ending this service's Attempts, each part in its own module with the
state it owns (an Attempt's life in order):

- ``start``: the start pass; a start that made no process goes back to the queue;
- ``identity``: recording a started process's identity, before the bound its Run Lease sets;
- ``exits``: watching leaders, and what happens when one exits (the end decided and recorded);
- ``fences``: stopping the processes of Attempts the store ended elsewhere;
- ``renewals``: renewing the Run Leases of the Attempts this service started;
- ``logs``: the log directory, and each ended Attempt's log handed to the store's copies;
- ``settlement``: undos, ends and lease completions that failed, retried until done;
- ``running``: the in-memory record of a watched Attempt, its states as types, and the registry;
- ``tools``: what every part works with (the store's Run port, the worker session, ...);
- ``supervisor``: ``AttemptSupervisor``, which builds the parts and answers the service's loop.
"""

from edge_runtime.service.attempts.identity import REASON_STOPPED_UNRECORDED
from edge_runtime.service.attempts.supervisor import AttemptSupervisor

__all__ = ["AttemptSupervisor", "REASON_STOPPED_UNRECORDED"]
