"""Requests to service calls: this module routes a parsed request, calls the service,
and encodes the reply or the error envelope; nothing else. The HTTP transport (the
socket, SO_PEERCRED, connection handling) is `batchd/httpserver.py`. Routes and message
shapes are those of `batchd/protocol.py`."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy.exc import DBAPIError

from batchd import accounts, steps
from batchd.errors import BatchdError, InvalidRequest, NotFound
from batchd.explain import explain
from batchd.service import Caller, Service

log = logging.getLogger(__name__)

Handler = Callable[[Service, Caller, dict[str, str], Any], Any]


def _ids(body: Any) -> list[str]:
    if not isinstance(body, dict) or not isinstance(body.get("ids"), list):
        raise InvalidRequest("body needs a list of job ids")
    return [str(i) for i in body["ids"]]


ROUTES: dict[tuple[str, str], Handler] = {
    ("GET", "/v1/ping"): lambda s, c, q, b: {"cluster": s.cfg.cluster_name, "version": "0.1.0"},
    ("POST", "/v1/jobs"): lambda s, c, q, b: s.submit(c, (b or {}).get("spec")),
    ("GET", "/v1/jobs"): lambda s, c, q, b: s.list_jobs(q),
    ("POST", "/v1/jobs/signal"): lambda s, c, q, b: s.signal_jobs(c, b or {}),
    ("POST", "/v1/jobs/hold"): lambda s, c, q, b: s.hold(c, _ids(b), user=bool((b or {}).get("user"))),
    ("POST", "/v1/jobs/release"): lambda s, c, q, b: s.hold(c, _ids(b), release=True),
    ("POST", "/v1/jobs/requeue"): lambda s, c, q, b: s.requeue(c, _ids(b), hold=bool((b or {}).get("hold"))),
    ("POST", "/v1/jobs/update"): lambda s, c, q, b: s.update(c, _ids(b), (b or {}).get("changes") or {}),
    ("GET", "/v1/accounting"): lambda s, c, q, b: s.accounting(c, q),
    ("GET", "/v1/nodes"): lambda s, c, q, b: s.nodes(),
    ("GET", "/v1/snapshot"): lambda s, c, q, b: s.snapshot(),
    ("POST", "/v1/steps"): lambda s, c, q, b: steps.create(s, c, b or {}),
    ("GET", "/v1/steps"): lambda s, c, q, b: steps.status(s, q),
    ("POST", "/v1/steps/cancel"): lambda s, c, q, b: steps.cancel(s, c, b or {}),
    ("GET", "/v1/why"): lambda s, c, q, b: explain(s, q.get("job", "")),
    ("GET", "/v1/controller"): lambda s, c, q, b: s.controller_status(),
    ("POST", "/v1/nodes/state"): lambda s, c, q, b: s.set_node_state(c, b or {}),
    ("GET", "/v1/accounts"): lambda s, c, q, b: accounts.to_doc(s.store.list_accounts(),
                                                                s.store.list_associations()),
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


def handle(service: Service, caller: Caller, method: str, target: str, raw_body: bytes) -> tuple[int, Any]:
    """Answer one request: (HTTP status, JSON-able payload). Never raises: a client's
    mistake is a 4xx envelope, batchd's own bug a logged 500."""
    parts = urlsplit(target)
    query = dict(parse_qsl(parts.query))
    try:
        route = ROUTES.get((method, parts.path))
        if route is None:
            raise NotFound(f"no such endpoint: {method} {parts.path}")
        body = None
        if raw_body:
            try:
                body = json.loads(raw_body)
            except ValueError:
                raise InvalidRequest("request body is not JSON") from None
        return 200, route(service, caller, query, body)
    except BatchdError as e:
        return e.status, e.envelope()
    except DBAPIError as e:
        # the database is unreachable (or restarting): say so; nothing was changed
        log.error("database error method=%s path=%s error=%s", method, parts.path, str(e).splitlines()[0])
        return 503, {"error": {"code": "DatabaseUnavailable", "exit": 1,
                               "message": "the batchd database is unreachable; nothing was changed, try again"}}
    except Exception:  # the top of a request: log it, answer 500, keep serving
        log.exception("request failed method=%s path=%s uid=%s", method, parts.path, caller.uid)
        return 500, {"error": {"code": "Internal", "message": "internal error in batchd (see its log)",
                               "exit": 1}}
