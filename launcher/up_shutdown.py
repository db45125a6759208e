"""The orderly stop of `streamrec up`, upstream first so nothing is lost in between:

1. the record source (no new records);
2. the final pass, while the trainers still run (``up.commit_on_exit``; :mod:`launcher.up_final_pass`);
3. the service (SIGINT: uvicorn's graceful shutdown);
4. the trainers (SIGTERM, time to finish a pass being saved, then SIGKILL) and then the shards
   (the launcher stops them); only then is the final pass reported committed, if its manifest is;
5. whatever of `up`'s own roles is left after a grace period: their whole process groups are killed;
6. the embedded broker, if `up` started it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from launcher.up_final_pass import FinalPass
from launcher.up_roles import UpRoles
from launcher.up_source import SOURCE_ROLES

if TYPE_CHECKING:
    from streaming.broker import EmbeddedBroker

_STOP_GRACE_S = 10.0  # for `up`'s own roles, after the trainers and shards stopped
_LAUNCHER_STOP_S = 30.0  # beyond the trainers' grace (the launcher's spec): the shards' own
_REAP_S = 5.0


def shut_down(roles: UpRoles, *, final_pass: FinalPass | None, broker: EmbeddedBroker | None,
              say: Callable[[str], None]) -> None:
    """Stop every role in the order above; ``final_pass`` (None: skip it) is asked for only while
    the trainers are still up, and reported once they stopped."""
    for role in roles.named(*SOURCE_ROLES):
        role.kill(signal.SIGTERM)
    cluster = roles.cluster
    final = final_pass if cluster is not None and cluster.alive() else None
    if final is not None:
        final.commit()
    for role in roles.named("service"):
        role.kill(signal.SIGINT)  # uvicorn: graceful shutdown
    if cluster is not None:  # it stops the workers and shards itself
        cluster.stop(timeout_s=cluster.launcher.spec.stop_grace_s + _LAUNCHER_STOP_S)
    if final is not None:
        final.report()
    deadline = time.monotonic() + _STOP_GRACE_S
    for role in roles.own:
        if role.proc is None:
            continue
        if role.wait(max(0.1, deadline - time.monotonic())) is None:
            role.dump_stacks()
        role.kill(signal.SIGKILL)  # the whole group: stragglers too
        role.wait(_REAP_S)
        role.close_log()
    if broker is not None:
        broker.stop()
    say("stopped")
