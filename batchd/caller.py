"""Who asked: a `Caller` (uid, gid and pid from SO_PEERCRED, taken once per connection
by the transport) and the user name of a uid. Authorization on a Caller lives in
`batchd.service`.
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    uid: int
    gid: int
    pid: int = 0

    @property
    def user(self) -> str:
        return user_name(self.uid)


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
