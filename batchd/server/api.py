"""Requests to service calls: this module routes a parsed request, checks it against
the wire contract (`batchd/server/wire_requests.py`: every route has its query and body schema;
a violation is a 400 naming the field and the rule, before the service sees anything),
calls the service, and encodes the reply or the error envelope; nothing else. The HTTP
transport (the socket, SO_PEERCRED, connection handling) is `batchd/server/httpserver.py`.
The endpoints are `batchd/protocol.py`'s ENDPOINTS (one named handler each, below and in
`batchd/accounting/routes.py`); their message shapes are `batchd/server/messages.py`'s.

A database error reaches this module as the store's `StoreError` and is answered 503 with
its cause named (`batchd.store.dberrors`): `DiskFull`, `DatabaseBusy`, `DatabaseConflict`,
else `DatabaseUnavailable`. In each case the request's transaction was rolled back: nothing
was changed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from batchd import faults
from batchd.errors import BatchdError, InvalidRequest, NotFound, StoreError
from batchd.server import accounts, steps
from batchd.server import messages as m
from batchd.server.explain import explain
from batchd.server.service import Caller, Service
from batchd.server.wire import check_request
from batchd.server.wire_requests import REQUESTS
from batchd.store.dberrors import DB_ERRORS, DRIVER_ERRORS, store_error

log = logging.getLogger(__name__)

VERSION = "0.1.0"

Handler = Callable[[Service, Caller, Any, Any], object]
"""A route's handler: (service, caller, query, body) -> the reply. The query is a dict of
strings, the body the decoded JSON object (None for a route without one; {} when a route
with one got none), both already checked against the route's rule
(batchd/server/wire_requests.py), so a handler reads them as their shapes of batchd/server/messages.py
say. Authorization is the service's (require_admin, require_owner)."""


def _ids(ids: m.JobIds) -> list[str]:
    return [str(i) for i in ids]


def ping(s: Service, c: Caller, q: m.Query, b: None) -> m.Ping:
    return {"cluster": s.cfg.cluster_name, "version": VERSION}


def submit(s: Service, c: Caller, q: m.Query, b: m.SubmitRequest) -> dict[str, Any]:
    return s.submit(c, dict(b["spec"]))


def list_jobs(s: Service, c: Caller, q: m.Query, b: None) -> dict[str, Any]:
    return s.list_jobs(q)


def signal(s: Service, c: Caller, q: m.Query, b: m.SignalRequest) -> m.DoneReply:
    return s.signal_jobs(c, dict(b))


def hold(s: Service, c: Caller, q: m.Query, b: m.HoldRequest) -> m.DoneReply:
    return s.hold(c, _ids(b["ids"]), user=bool(b.get("user")))


def release(s: Service, c: Caller, q: m.Query, b: m.ReleaseRequest) -> m.DoneReply:
    return s.hold(c, _ids(b["ids"]), release=True)


def requeue(s: Service, c: Caller, q: m.Query, b: m.RequeueRequest) -> m.DoneReply:
    return s.requeue(c, _ids(b["ids"]), hold=bool(b.get("hold")))


def update(s: Service, c: Caller, q: m.Query, b: m.UpdateRequest) -> m.DoneReply:
    return s.update(c, _ids(b["ids"]), dict(b.get("changes") or {}))


def accounting(s: Service, c: Caller, q: m.Query, b: None) -> dict[str, Any]:
    return s.accounting(c, q)


def nodes(s: Service, c: Caller, q: m.Query, b: None) -> dict[str, Any]:
    return s.nodes()


def snapshot(s: Service, c: Caller, q: m.Query, b: None) -> dict[str, Any]:
    return s.snapshot(q)


def create_step(s: Service, c: Caller, q: m.Query, b: m.StepRequest) -> m.StepReply:
    return steps.create(s, c, b)


def step_status(s: Service, c: Caller, q: m.Query, b: None) -> m.StepTasksReply | m.ActiveStepsReply:
    return steps.status(s, q)


def cancel_step(s: Service, c: Caller, q: m.Query, b: m.StepCancelRequest) -> m.StepCancelReply:
    return steps.cancel(s, c, b)


def why(s: Service, c: Caller, q: m.Query, b: None) -> m.WhyReply:
    return explain(s, q.get("job", ""))


def controller(s: Service, c: Caller, q: m.Query, b: None) -> dict[str, Any]:
    return s.controller_status()


def set_node_state(s: Service, c: Caller, q: m.Query, b: m.NodeStateRequest) -> m.NodeStateReply:
    return s.set_node_state(c, dict(b))


def token(s: Service, c: Caller, q: m.Query, b: m.TokenRequest) -> m.TokenReply:
    return s.issue_token(c, b.get("lifespan"), b.get("username"))


def list_accounts(s: Service, c: Caller, q: m.Query, b: None) -> dict[str, Any]:
    if q.get("slurm") == "1":
        return accounts.slurm_view(s)
    return accounts.to_doc(s.store.list_accounts(), s.store.list_associations())


def apply_accounts(s: Service, c: Caller, q: m.Query, b: m.ApplyRequest) -> m.ApplyReply:
    return accounts.apply_doc(s, c, dict(b["doc"] or {}), bool(b.get("dry_run")))


def modify_accounts(s: Service, c: Caller, q: m.Query, b: m.ModifyRequest) -> m.ApplyReply:
    return accounts.modify(s, c, dict(b))


#: every endpoint and its handler; batchd/protocol.py's ENDPOINTS is the table of them
#: (tests/wire/test_protocol.py holds both to each other)
ROUTES: dict[tuple[str, str], Handler] = {
    ("GET", "/v1/ping"): ping,
    ("POST", "/v1/jobs"): submit,
    ("GET", "/v1/jobs"): list_jobs,
    ("POST", "/v1/jobs/signal"): signal,
    ("POST", "/v1/jobs/hold"): hold,
    ("POST", "/v1/jobs/release"): release,
    ("POST", "/v1/jobs/requeue"): requeue,
    ("POST", "/v1/jobs/update"): update,
    ("GET", "/v1/accounting"): accounting,
    ("GET", "/v1/nodes"): nodes,
    ("GET", "/v1/snapshot"): snapshot,
    ("POST", "/v1/steps"): create_step,
    ("GET", "/v1/steps"): step_status,
    ("POST", "/v1/steps/cancel"): cancel_step,
    ("GET", "/v1/why"): why,
    ("GET", "/v1/controller"): controller,
    ("POST", "/v1/nodes/state"): set_node_state,
    ("POST", "/v1/token"): token,
    ("GET", "/v1/accounts"): list_accounts,
    ("POST", "/v1/accounts/apply"): apply_accounts,
    ("POST", "/v1/accounts/modify"): modify_accounts,
}


def _extension_routes() -> None:
    """Routes of optional modules (chargeback) that register themselves."""
    try:
        from batchd.accounting.routes import ROUTES as extra
    except ModuleNotFoundError as e:  # only a missing module is optional; its bugs are not
        if e.name not in ("batchd.accounting", "batchd.accounting.routes"):
            raise
        return
    ROUTES.update(extra)


_extension_routes()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _decode(raw_body: bytes) -> Any:
    """The JSON body; NaN/Infinity (which Python's reader would accept) and invalid UTF-8
    are not JSON."""
    try:
        return json.loads(raw_body, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise InvalidRequest("request body is not JSON") from None


__all__ = ["DB_ERRORS", "ROUTES", "handle"]


def handle(service: Service, caller: Caller, method: str, target: str, raw_body: bytes) -> tuple[int, Any]:
    """Answer one request: (HTTP status, JSON-able payload). Never raises: a client's
    mistake is a 4xx envelope, batchd's own bug a logged 500."""
    parts = urlsplit(target)
    try:
        query = dict(parse_qsl(parts.query, errors="strict"))
    except UnicodeDecodeError:
        return 400, InvalidRequest("the query string is not UTF-8").envelope()
    try:
        route = ROUTES.get((method, parts.path))
        if route is None:
            raise NotFound(f"no such endpoint: {method} {parts.path}")
        body = _decode(raw_body) if raw_body else None
        rule = REQUESTS[(method, parts.path)]
        check_request(rule, query, body, method, parts.path, getattr(service.cfg, "limits", None))
        if body is None and rule.body is not None:
            body = {}  # no body where one is taken: checked as, and handed on as, an empty object
        return 200, route(service, caller, query, body)
    except StoreError as e:
        return _database(method, parts.path, e)
    except BatchdError as e:
        return e.status, e.envelope()
    except DRIVER_ERRORS as e:  # a database error that did not come through a store transaction
        err = store_error(e)
        err.__cause__ = e
        return _database(method, parts.path, err)
    except OSError as e:
        if faults.cause(e) == faults.NO_SPACE:
            log.error("disk full method=%s path=%s error=%s", method, parts.path, e)
            return 503, {"error": {"code": "DiskFull", "exit": 1,
                                   "message": "a disk of the batchd daemon is full (no space left on device); "
                                              "nothing was changed"}}
        return _internal(method, parts.path, caller)
    except Exception:  # the top of a request: log it, answer 500, keep serving
        return _internal(method, parts.path, caller)


def _database(method: str, path: str, e: StoreError) -> tuple[int, Any]:
    """A database error (its cause, DB_ERRORS' code): logged with the driver's words, a 503."""
    why = e.__cause__ if e.__cause__ is not None else e
    log.error("database error method=%s path=%s cause=%s error=%s", method, path, e.code,
              str(why).splitlines()[0] if str(why) else type(why).__name__)
    return e.status, e.envelope()


def _internal(method: str, path: str, caller: Caller) -> tuple[int, Any]:
    """batchd's own bug (called inside an except block): logged with its traceback, a 500."""
    log.exception("request failed method=%s path=%s uid=%s", method, path, caller.uid)
    return 500, {"error": {"code": "Internal", "message": "internal error in batchd (see its log)", "exit": 1}}
