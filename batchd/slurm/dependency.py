"""`--dependency` specifications: parse, evaluate, describe.

Pure (no I/O, no clock, no logging): the daemon's submit service parses, the
scheduler evaluates on every cycle, squeue/scontrol describe what is left.

Grammar (Slurm's)
-----------------
`TYPE:JOB[:JOB...]` items joined by `,` (all must hold) or by `?` (any one suffices);
one separator kind per specification. TYPE is `after`, `afterany`, `afterok`,
`afternotok`, `aftercorr`, `afterburstbuffer` (treated as `afterany`: batchd has no
burst buffers) or the bare word `singleton`. JOB is a job id, `ID_TASK` for one task
of an array, or `ID_*` for the whole array (the same as `ID`); `after` takes an
optional delay `ID+MINUTES`. A bare list of job ids (`123:456`) is the legacy form of
`afterany`. Anything else raises `DependencyError` with Slurm's message
`Job dependency problem` (the submission then fails, exit 1).

Parsed form
-----------
`{"op": "and" | "or", "items": [{"type": str, "job_id": int | None, "task_id": int | None,
"delay_s": int}]}`; `singleton` items have job_id None. The form is plain JSON so the
store can keep it as is.

Evaluation
----------
`evaluate(dep, lookup_state, *, job_id=None, task_id=None, singleton_jobs=(),
lookup_start=None, now=None) -> "satisfied" | "pending" | "never"`:

- `lookup_state(job_id, task_id)` returns the Slurm state name of that job (task_id
  None: the job, or for an array every task's state as a list of str), or None when
  the job is unknown (purged). An unknown job satisfies the dependency, as in Slurm
  (the check that the job exists at submission is `check_known`).
- `singleton_jobs`: `(job_id, state)` of the other jobs with the same name and user
  (active or recently finished); a singleton holds while any of them is RUNNING or
  SUSPENDED, or PENDING with a smaller job id (submitted earlier) -- Slurm's rule, which
  lets the earliest of a pending group go first.
- `job_id`/`task_id`: the dependent job (its task id for `aftercorr`, which then
  waits for the task with the same index).
- `lookup_start(job_id, task_id) -> float | None` and `now` serve `after:ID+MIN`
  (satisfied once the job started MIN minutes ago); without them the delay is ignored.

Rules per type (Slurm's): `after` holds once the job left PENDING (started or was
cancelled); `afterany` once it ended in any state; `afterok` once it COMPLETED, never
if it ended otherwise; `afternotok` once it ended in any state but COMPLETED, never if
it COMPLETED; `aftercorr` like `afterok` on the task with the same index. For `,` all
items must hold (never if one never will); for `?` one is enough (never if none can).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from batchd.slurm.digits import isdigits

Lookup = Callable[[int, "int | None"], Any]
MESSAGE = "Job dependency problem"
TYPES = ("after", "afterany", "afterok", "afternotok", "aftercorr", "afterburstbuffer")
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
         "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
_RUNNING_LIKE = ("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STOPPED", "SIGNALING")


class DependencyError(ValueError):
    """A `--dependency` value Slurm refuses; `str(e)` is Slurm's message."""

    def __init__(self, message: str = MESSAGE) -> None:
        super().__init__(message)
        self.message = message


def _job_ref(text: str, allow_delay: bool) -> tuple[int, int | None, int]:
    delay_s = 0
    if "+" in text:
        if not allow_delay:
            raise DependencyError()
        text, _, mins = text.partition("+")
        if not isdigits(mins):
            raise DependencyError()
        delay_s = int(mins) * 60
    task_id = None
    if "_" in text:
        text, _, task = text.partition("_")
        if task == "*":
            task_id = None
        elif isdigits(task):
            task_id = int(task)
        else:
            raise DependencyError()
    if not isdigits(text) or int(text) <= 0:
        raise DependencyError()
    return int(text), task_id, delay_s


def parse(text: str | None) -> dict:
    """The parsed form (module docstring) of a `--dependency` value; DependencyError."""
    if text is None:
        raise DependencyError()
    spec = text.strip()
    if not spec:
        raise DependencyError()
    if "," in spec and "?" in spec:
        raise DependencyError()
    op = "or" if "?" in spec else "and"
    items = []
    for part in spec.split("?" if op == "or" else ","):
        if part == "":
            raise DependencyError()
        if part.lower() == "singleton":
            items.append({"type": "singleton", "job_id": None, "task_id": None, "delay_s": 0})
            continue
        head, sep, rest = part.partition(":")
        kind = head.lower()
        if isdigits(kind) or (head and isdigits(head[0])):
            # legacy form: a plain list of job ids means afterany
            kind, rest = "afterany", part
        elif not sep or kind not in TYPES:
            raise DependencyError()
        if kind == "afterburstbuffer":
            kind = "afterany"
        refs = rest.split(":")
        if not refs or any(r == "" for r in refs):
            raise DependencyError()
        for r in refs:
            jid, tid, delay = _job_ref(r, kind == "after")
            items.append({"type": kind, "job_id": jid, "task_id": tid, "delay_s": delay})
    return {"op": op, "items": items}


def job_refs(dep: dict) -> list[tuple[int, int | None]]:
    """The `(job_id, task_id)` pairs a parsed dependency names (singleton excluded)."""
    return [(it["job_id"], it["task_id"]) for it in dep["items"] if it["job_id"] is not None]


def check_known(dep: dict, lookup_state: Lookup, job_id: int | None = None) -> None:
    """Raise DependencyError when an `afterok`/`afternotok`/`aftercorr` item names a job
    that `lookup_state` does not know, or when the job depends on itself (Slurm refuses
    both at submission)."""
    for it in dep["items"]:
        if it["job_id"] is None:
            continue
        if job_id is not None and it["job_id"] == job_id:
            raise DependencyError()
        if it["type"] in ("afterok", "afternotok", "aftercorr"):
            if lookup_state(it["job_id"], it["task_id"]) in (None, []):
                raise DependencyError()


def _states(v: Any) -> list[str] | None:
    if v is None:
        return None
    if isinstance(v, str):
        return [v]
    return list(v)


def _item(it: dict, lookup_state: Lookup, job_id: int | None, task_id: int | None,
          singleton_jobs: Iterable[tuple[int, str]], lookup_start: Lookup | None, now: float | None) -> str:
    kind = it["type"]
    if kind == "singleton":
        for other_id, state in singleton_jobs:
            if other_id == job_id:
                continue
            if state in _RUNNING_LIKE:
                return "pending"
            if state == "PENDING" and (job_id is None or other_id < job_id):
                return "pending"
        return "satisfied"
    tid = it["task_id"]
    if kind == "aftercorr" and tid is None and task_id is not None:
        tid = task_id
    states = _states(lookup_state(it["job_id"], tid))
    if not states:
        return "satisfied"  # the job is gone: Slurm lifts the dependency
    if kind == "after":
        if any(s == "PENDING" for s in states):
            return "pending"
        if it["delay_s"] and lookup_start is not None and now is not None:
            st = lookup_start(it["job_id"], tid)
            if st is not None and now < st + it["delay_s"]:
                return "pending"
        return "satisfied"
    if not all(s in FINAL for s in states):
        return "pending"
    if kind == "afterany":
        return "satisfied"
    if kind in ("afterok", "aftercorr"):
        return "satisfied" if all(s == "COMPLETED" for s in states) else "never"
    # afternotok
    return "satisfied" if any(s != "COMPLETED" for s in states) else "never"


def item_results(dep: dict, lookup_state: Lookup, *, job_id: int | None = None, task_id: int | None = None,
                 singleton_jobs: Iterable[tuple[int, str]] = (), lookup_start: Lookup | None = None,
                 now: float | None = None) -> list[str]:
    """Per item, in order: "satisfied" | "pending" | "never"."""
    return [_item(it, lookup_state, job_id, task_id, singleton_jobs, lookup_start, now)
            for it in dep["items"]]


def evaluate(dep: dict, lookup_state: Lookup, *, job_id: int | None = None, task_id: int | None = None,
             singleton_jobs: Iterable[tuple[int, str]] = (), lookup_start: Lookup | None = None,
             now: float | None = None) -> str:
    """"satisfied" | "pending" | "never" for a parsed dependency (module docstring)."""
    res = item_results(dep, lookup_state, job_id=job_id, task_id=task_id,
                       singleton_jobs=singleton_jobs, lookup_start=lookup_start, now=now)
    if not res:
        return "satisfied"
    if dep["op"] == "or":
        if "satisfied" in res:
            return "satisfied"
        return "never" if all(r == "never" for r in res) else "pending"
    if "never" in res:
        return "never"
    return "satisfied" if all(r == "satisfied" for r in res) else "pending"


def format_item(it: dict) -> str:
    """One item as Slurm writes it: `afterok:63`, `after:12+5`, `afterany:7_3`, `singleton`."""
    if it["type"] == "singleton":
        return "singleton"
    ref = str(it["job_id"])
    if it["task_id"] is not None:
        ref += f"_{it['task_id']}"
    if it["delay_s"]:
        ref += f"+{it['delay_s'] // 60}"
    return f"{it['type']}:{ref}"


def describe(dep: dict | None, results: list[str]) -> str:
    """squeue `%E` / scontrol `Dependency=`: the items not yet satisfied, each with
    `(unfulfilled)` or `(failed)`, joined by `,` or `?`; `(null)` when none is left.
    `results` is `item_results(...)` for the same dependency."""
    if dep is None:
        return "(null)"
    sep = "?" if dep["op"] == "or" else ","
    parts = []
    for it, r in zip(dep["items"], results, strict=True):
        if r == "satisfied":
            continue
        parts.append(format_item(it) + ("(failed)" if r == "never" else "(unfulfilled)"))
    return sep.join(parts) if parts else "(null)"


def status(dep: dict | None, lookup_state: Lookup, *, job_id: int | None = None, task_id: int | None = None,
           singleton_jobs: Iterable[tuple[int, str]] = (), lookup_start: Lookup | None = None,
           now: float | None = None) -> tuple[str, str]:
    """(verdict, squeue text) in one pass: `evaluate`'s verdict and `describe`'s
    `Dependency=` text (`(null)` once everything is satisfied), for the controller to
    store on the job so that squeue `%E` and scontrol show what Slurm shows."""
    if not dep:
        return "satisfied", "(null)"
    res = item_results(dep, lookup_state, job_id=job_id, task_id=task_id, singleton_jobs=singleton_jobs,
                       lookup_start=lookup_start, now=now)
    if dep["op"] == "or":
        verdict = "satisfied" if "satisfied" in res else ("never" if all(r == "never" for r in res) else "pending")
    else:
        verdict = "never" if "never" in res else ("satisfied" if all(r == "satisfied" for r in res) else "pending")
    if not res:
        verdict = "satisfied"
    return verdict, ("(null)" if verdict == "satisfied" else describe(dep, res))
