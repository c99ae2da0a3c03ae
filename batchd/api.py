"""Requests to service calls: this module routes a parsed request, checks it against
the wire contract (`batchd/wire_requests.py`: every route has its query and body schema;
a violation is a 400 naming the field and the rule, before the service sees anything),
calls the service, and encodes the reply or the error envelope; nothing else. The HTTP
transport (the socket, SO_PEERCRED, connection handling) is `batchd/httpserver.py`.
Routes and message shapes are those of `batchd/protocol.py`.

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

from batchd import accounts, faults, steps
from batchd.errors import BatchdError, InvalidRequest, NotFound, StoreError
from batchd.explain import explain
from batchd.service import Caller, Service
from batchd.store.dberrors import DB_ERRORS, DRIVER_ERRORS, store_error
from batchd.wire import check_request
from batchd.wire_requests import REQUESTS

log = logging.getLogger(__name__)

Handler = Callable[[Service, Caller, dict[str, str], Any], Any]


def _ids(body: Any) -> list[str]:
    if not isinstance(body, dict) or not isinstance(body.get("ids"), list):
        raise InvalidRequest("body needs a list of job ids")
    return [str(i) for i in body["ids"]]


ROUTES: dict[tuple[str, str], Handler] = {
    ("GET", "/v1/ping"): lambda s, c, q, b: {"cluster": s.cfg.cluster_name, "version": "0.1.0"},
    ("POST", "/v1/jobs"): lambda s, c, q, b: s.submit(c, (b or {}).get("spec") or {}),
    ("GET", "/v1/jobs"): lambda s, c, q, b: s.list_jobs(q),
    ("POST", "/v1/jobs/signal"): lambda s, c, q, b: s.signal_jobs(c, b or {}),
    ("POST", "/v1/jobs/hold"): lambda s, c, q, b: s.hold(c, _ids(b), user=bool((b or {}).get("user"))),
    ("POST", "/v1/jobs/release"): lambda s, c, q, b: s.hold(c, _ids(b), release=True),
    ("POST", "/v1/jobs/requeue"): lambda s, c, q, b: s.requeue(c, _ids(b), hold=bool((b or {}).get("hold"))),
    ("POST", "/v1/jobs/update"): lambda s, c, q, b: s.update(c, _ids(b), (b or {}).get("changes") or {}),
    ("GET", "/v1/accounting"): lambda s, c, q, b: s.accounting(c, q),
    ("GET", "/v1/nodes"): lambda s, c, q, b: s.nodes(),
    ("GET", "/v1/snapshot"): lambda s, c, q, b: s.snapshot(),
    ("POST", "/v1/steps"): lambda s, c, q, b: steps.create(s, c, b),
    ("GET", "/v1/steps"): lambda s, c, q, b: steps.status(s, q),
    ("POST", "/v1/steps/cancel"): lambda s, c, q, b: steps.cancel(s, c, b),
    ("GET", "/v1/why"): lambda s, c, q, b: explain(s, q.get("job", "")),
    ("GET", "/v1/controller"): lambda s, c, q, b: s.controller_status(),
    ("POST", "/v1/nodes/state"): lambda s, c, q, b: s.set_node_state(c, b or {}),
    ("GET", "/v1/accounts"): lambda s, c, q, b: (accounts.slurm_view(s) if q.get("slurm") == "1" else
                                                 accounts.to_doc(s.store.list_accounts(),
                                                                 s.store.list_associations())),
    ("POST", "/v1/accounts/apply"): lambda s, c, q, b: accounts.apply_doc(s, c, (b or {}).get("doc") or {},
                                                                          bool((b or {}).get("dry_run"))),
    ("POST", "/v1/accounts/modify"): lambda s, c, q, b: accounts.modify(s, c, b or {}),
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
