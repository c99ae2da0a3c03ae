"""Who asked: a `Caller` (uid, gid and pid from SO_PEERCRED, taken once per connection
by the transport) and the user name of a uid. Authorization on a Caller lives in
`batchd.server.service`.
"""

from __future__ import annotations

import pwd
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    uid: int
    gid: int
    pid: int = 0

    @property
    def user(self) -> str:
        return user_name(self.uid)


#: uid -> (name, when it was looked up): each lookup reads the password database (NSS),
#: a file read per request; a name is kept for NAME_TTL_S (as slurmctld keeps its uid cache)
_names: dict[int, tuple[str, float]] = {}
NAME_TTL_S = 60.0


def user_name(uid: int) -> str:
    """The login name of `uid` (looked up again after NAME_TTL_S), else the uid as text (a
    uid without a name is not kept: a user created meanwhile is seen at once)."""
    now = time.monotonic()
    kept = _names.get(uid)
    if kept is not None and now - kept[1] < NAME_TTL_S:
        return kept[0]
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
    if len(_names) >= 10_000:
        _names.clear()
    _names[uid] = (name, now)
    return name
