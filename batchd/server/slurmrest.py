"""The slurmrestd API, version v0.0.38 (Slurm 22.05's newest, the version the recorded
Slurm of `tests/fixtures/slurmrestd/` speaks), on the daemon's TCP listener:

    GET    /slurm/v0.0.38/ping | diag | jobs | job/{id} | nodes | node/{name}
           | partitions | partition/{name}
    POST   /slurm/v0.0.38/job/submit          (v0.0.38_job_submission)
    POST   /slurm/v0.0.38/job/{id}            (v0.0.38_job_properties: an update)
    DELETE /slurm/v0.0.38/job/{id}[?signal=]  (cancel, or send a signal)
    GET    /slurmdb/v0.0.38/accounts | account/{name} | associations | jobs | job/{id}

Authentication is slurmrestd's `rest_auth/jwt`: `X-SLURM-USER-TOKEN` carries a token
from `scontrol token` (batchd.server.tokens), `X-SLURM-USER-NAME` the user; the token's
user is the caller, with exactly the rights that user has on the Unix socket. A name
other than the token's is taken only with a token of root's or the daemon's own user
(Slurm: root or SlurmUser may act for others). No token, a bad one, or an unknown user:
401 and nothing is done.

Each request becomes the socket request it stands for, handled by `batchd.server.api`
(the same checks of the wire contract, the same authorization, the same errors); the
replies are re-shaped by `batchd.server.restshapes`. A submission is read through
`batchd.slurm.jobopts`, sbatch's own option grammar, so that `POST .../job/submit` with
`{"time_limit": 30, "gres": "gpu:h200:2"}` makes the job `sbatch -t 30 --gres=gpu:h200:2`
makes. An error is answered as slurmrestd answers it: status 500 (400 for a body that is
no JSON) and `errors: [{"error", "error_number", "description", "source"}]`.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import re
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode

from batchd.errors import BatchdError
from batchd.server import api
from batchd.server import restshapes as shapes
from batchd.server.caller import Caller
from batchd.server.service import Service
from batchd.server.tokens import TokenError
from batchd.server.weblistener import WebReply, WebRequest
from batchd.slurm import jobopts

log = logging.getLogger(__name__)

SLURM = "/slurm/v0.0.38/"
SLURMDB = "/slurmdb/v0.0.38/"
JSON = "application/json"

#: Slurm's error numbers (slurm_errno.h) for the errors a client tells apart
ERRNO = {"NotFound": 2017, "AccessDenied": 2002, "AuthenticationFailed": 1007, "InvalidRequest": 9000,
         "SubmitRejected": 2000}
SIGNALS = {"HUP": 1, "INT": 2, "QUIT": 3, "ABRT": 6, "KILL": 9, "ALRM": 14, "TERM": 15, "USR1": 10, "USR2": 12,
           "URG": 23, "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22}


class RestError(Exception):
    def __init__(self, message: str, number: int = 1, status: int = 500, source: str = "batchd"):
        super().__init__(message)
        self.message, self.number, self.status, self.source = message, number, status, source


def _reply(status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> WebReply:
    return WebReply(status, json.dumps(payload, separators=(",", ":")).encode(), JSON, headers or {})


def error_reply(e: RestError, **extra: Any) -> WebReply:
    err = {"error": e.message, "error_number": e.number, "description": e.message, "source": e.source}
    return _reply(e.status, dict(shapes.envelope(**extra), errors=[err]))


class SlurmRest:
    """The route for `/slurm/` and `/slurmdb/` (a WebListener prefix route)."""

    def __init__(self, service: Service):
        self.service = service
        self.cluster = service.cfg.cluster_name
        self.routes: list[tuple[str, re.Pattern[str], Callable[..., WebReply]]] = [
            ("GET", re.compile(SLURM + r"ping/?"), self.ping),
            ("GET", re.compile(SLURM + r"diag/?"), self.diag),
            ("GET", re.compile(SLURM + r"jobs/?"), self.jobs),
            ("POST", re.compile(SLURM + r"job/submit/?"), self.submit),
            ("GET", re.compile(SLURM + r"job/(?P<ident>[^/]+)/?"), self.job),
            ("POST", re.compile(SLURM + r"job/(?P<ident>[^/]+)/?"), self.update),
            ("DELETE", re.compile(SLURM + r"job/(?P<ident>[^/]+)/?"), self.cancel),
            ("GET", re.compile(SLURM + r"nodes/?"), self.nodes),
            ("GET", re.compile(SLURM + r"node/(?P<ident>[^/]+)/?"), self.nodes),
            ("GET", re.compile(SLURM + r"partitions/?"), self.partitions),
            ("GET", re.compile(SLURM + r"partition/(?P<ident>[^/]+)/?"), self.partitions),
            ("GET", re.compile(SLURMDB + r"accounts/?"), self.accounts),
            ("GET", re.compile(SLURMDB + r"account/(?P<ident>[^/]+)/?"), self.accounts),
            ("GET", re.compile(SLURMDB + r"associations/?"), self.associations),
            ("GET", re.compile(SLURMDB + r"jobs/?"), self.db_jobs),
            ("GET", re.compile(SLURMDB + r"job/(?P<ident>[^/]+)/?"), self.db_jobs),
        ]

    # ------------------------------------------------------------------ the door
    def __call__(self, req: WebRequest) -> WebReply:
        found = [(method, m, handler) for method, pattern, handler in self.routes
                 if (m := pattern.fullmatch(req.path)) is not None]
        hit = next(((m, handler) for method, m, handler in found if method == req.method), None)
        if hit is None:
            if found:
                return WebReply(405, b"method not allowed\n", "text/plain")
            return WebReply(404, b"Unable find requested URL. Please view /openapi/v3 for API reference.",
                            "text/plain")
        match, handler = hit
        try:
            caller = self.authenticate(req)
        except RestError as e:
            log.info("rest request refused path=%s reason=%s", req.path, e.message)
            return error_reply(e)
        try:
            query = dict(parse_qsl(req.query, errors="strict"))
        except UnicodeDecodeError:
            return error_reply(RestError("the query string is not UTF-8", ERRNO["InvalidRequest"], 400))
        try:
            return handler(caller, query, req.body, **match.groupdict())
        except RestError as e:
            return error_reply(e, **({"jobs": []} if "job" in req.path else {}))

    def authenticate(self, req: WebRequest) -> Caller:
        token = req.header("X-SLURM-USER-TOKEN")
        name = req.header("X-SLURM-USER-NAME")
        if not token:
            raise RestError("authentication failure: no X-SLURM-USER-TOKEN (get one with `scontrol token`)",
                            ERRNO["AuthenticationFailed"], 401, "rest_auth/jwt")
        try:
            user = self.service.tokens.check(token)
        except TokenError as e:
            raise RestError(f"authentication failure: {e.message}", ERRNO["AuthenticationFailed"], 401,
                            "rest_auth/jwt") from None
        except BatchdError as e:  # no usable key
            raise RestError(e.message, 1, 503, "rest_auth/jwt") from None
        if name and name != user:
            if _uid(user) not in (0, os.geteuid()):
                raise RestError(f"authentication failure: a token of {user} cannot act as {name}",
                                ERRNO["AuthenticationFailed"], 401, "rest_auth/jwt")
            user = name
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise RestError(f"authentication failure: unknown user {user}", ERRNO["AuthenticationFailed"], 401,
                            "rest_auth/jwt") from None
        return Caller(uid=pw.pw_uid, gid=pw.pw_gid)

    def call(self, caller: Caller, method: str, target: str, body: Any = None, source: str = "batchd") -> Any:
        """One socket request (batchd.server.api); an error reply raised as RestError."""
        raw = b"" if body is None else json.dumps(body).encode()
        status, payload = api.handle(self.service, caller, method, target, raw)
        if status != 200:
            err = payload.get("error", {}) if isinstance(payload, dict) else {}
            raise RestError(str(err.get("message") or "error"), ERRNO.get(str(err.get("code")), 1), 500, source)
        return payload

    # ------------------------------------------------------------------ slurm
    def ping(self, caller: Caller, query: dict[str, str], body: bytes) -> WebReply:
        ctl = self.service.controller_status()
        host = ctl.get("node") or ctl.get("this_node") or socket.gethostname().split(".")[0]
        return _reply(200, shapes.envelope(pings=[{"hostname": str(host), "ping": "UP", "status": 0,
                                                    "mode": "primary"}]))

    def diag(self, caller: Caller, query: dict[str, str], body: bytes) -> WebReply:
        """sdiag's counters that batchd keeps: the jobs pending and running now, the
        submissions this daemon accepted and the cycles it ran since it started."""
        from batchd.metrics import CYCLE_SECONDS, SUBMISSIONS

        by_state: dict[str, int] = {}
        for state, _account, _partition, _reason, n in self.service.store.job_counts():
            by_state[state] = by_state.get(state, 0) + n
        cycles, cycle_s = _histogram(CYCLE_SECONDS)
        now = int(_now())
        stats = {"parts_packed": 1, "req_time": now, "req_time_start": int(_STARTED),
                 "server_thread_count": 1, "agent_queue_size": 0, "agent_count": 0, "agent_thread_count": 0,
                 "dbd_agent_queue_size": 0,
                 "jobs_submitted": int(SUBMISSIONS.labels(result="accepted")._value.get()),
                 "jobs_pending": by_state.get("PENDING", 0), "jobs_running": by_state.get("RUNNING", 0),
                 "schedule_cycle_total": cycles,
                 "schedule_cycle_mean": int(cycle_s / cycles * 1e6) if cycles else 0}
        return _reply(200, shapes.envelope(statistics=stats))

    def jobs(self, caller: Caller, query: dict[str, str], body: bytes, ident: str | None = None) -> WebReply:
        # a job array's pending tasks that never ran as one record, as slurmctld keeps them
        # (and squeue shows them without -r)
        target = "/v1/jobs?" + urlencode({"all": "1", "fold": "1", **({"ids": ident} if ident else {})})
        views = self.call(caller, "GET", target, source="slurm_load_jobs")["jobs"]
        if ident and not views:
            raise RestError("Invalid job id specified", ERRNO["NotFound"], 500, "slurm_load_job")
        # each job's JSON made once per version of its row, kept with its view (batchd.server.viewmemo)
        texts = self.service._view_memo.derived(views, "rest/v0.0.38", self._job_text)
        head = json.dumps(shapes.envelope(), separators=(",", ":"))[:-1]
        return WebReply(200, f'{head},"jobs":[{",".join(texts)}]}}'.encode(), JSON)

    def _job_text(self, view: dict[str, Any]) -> str:
        return json.dumps(shapes.job(view, self.cluster), separators=(",", ":"))

    def job(self, caller: Caller, query: dict[str, str], body: bytes, ident: str) -> WebReply:
        return self.jobs(caller, query, body, ident=_job_id(ident))

    def submit(self, caller: Caller, query: dict[str, str], body: bytes) -> WebReply:
        doc = _json(body)
        spec = submission_spec(doc, caller, self.service.cfg)
        reply = self.call(caller, "POST", "/v1/jobs", {"spec": spec}, source="slurm_submit_batch_job")
        log.info("rest submit job=%s uid=%d", reply.get("job_id"), caller.uid)
        return _reply(200, shapes.envelope(job_id=int(reply["job_id"]), step_id="BATCH", job_submit_user_msg=""))

    def update(self, caller: Caller, query: dict[str, str], body: bytes, ident: str) -> WebReply:
        jid = _job_id(ident)
        changes = update_changes(_json(body))
        reply = self.call(caller, "POST", "/v1/jobs/update", {"ids": [jid], "changes": changes},
                          source="slurm_update_job")
        _job_errors(reply, "slurm_update_job")
        return _reply(200, shapes.envelope())

    def cancel(self, caller: Caller, query: dict[str, str], body: bytes, ident: str) -> WebReply:
        jid = _job_id(ident)
        name = (query.get("signal") or "KILL").upper().removeprefix("SIG")
        signo = SIGNALS.get(name) or (int(name) if name.isdigit() and 0 < int(name) < 65 else None)
        if signo is None:
            raise RestError(f"Invalid signal: {query.get('signal')}", ERRNO["InvalidRequest"], 500, "slurm_kill_job")
        reply = self.call(caller, "POST", "/v1/jobs/signal", {"ids": [jid], "signal": signo},
                          source="slurm_kill_job")
        _job_errors(reply, "slurm_kill_job", f"unable to kill JobId={jid} with signal {signo}: ")
        return _reply(200, shapes.envelope())

    def nodes(self, caller: Caller, query: dict[str, str], body: bytes, ident: str | None = None) -> WebReply:
        reply = self.call(caller, "GET", "/v1/nodes", source="slurm_load_node")
        nodes = [n for n in reply["nodes"] if ident is None or n["name"] == ident]
        if ident and not nodes:
            raise RestError(f"Invalid node name specified: {ident}", 2009, 500, "slurm_load_node")
        return _reply(200, shapes.envelope(nodes=[shapes.node(n) for n in nodes]))

    def partitions(self, caller: Caller, query: dict[str, str], body: bytes, ident: str | None = None) -> WebReply:
        reply = self.call(caller, "GET", "/v1/nodes", source="slurm_load_partitions")
        parts = [p for p in reply["partitions"] if ident is None or p["name"] == ident]
        if ident and not parts:
            raise RestError(f"Invalid partition name specified: {ident}", 2000, 500, "slurm_load_partitions")
        cpus = {n["name"]: int(n.get("cpus") or 0) for n in reply["nodes"]}
        out = []
        for p in parts:
            item = shapes.partition(p)
            item["total_cpus"] = sum(cpus.get(n, 0) for n in p.get("nodes") or [])
            out.append(item)
        return _reply(200, shapes.envelope(partitions=out))

    # ------------------------------------------------------------------ slurmdb
    def accounts(self, caller: Caller, query: dict[str, str], body: bytes, ident: str | None = None) -> WebReply:
        doc = self.call(caller, "GET", "/v1/accounts?slurm=1", source="slurmdb_accounts_get")
        out = [a for a in shapes.accounts(doc, self.cluster) if ident is None or a["name"] == ident]
        if ident and not out:
            raise RestError(f"Nothing found with query: account={ident}", 2000, 500, "slurmdb_accounts_get")
        return _reply(200, shapes.envelope(accounts=out))

    def associations(self, caller: Caller, query: dict[str, str], body: bytes) -> WebReply:
        doc = self.call(caller, "GET", "/v1/accounts?slurm=1", source="slurmdb_associations_get")
        out = shapes.associations(doc, self.cluster)
        for key, field in (("account", "account"), ("user", "user")):
            if query.get(key):
                wanted = set(query[key].split(","))
                out = [a for a in out if a.get(field) in wanted]
        return _reply(200, shapes.envelope(associations=out))

    def db_jobs(self, caller: Caller, query: dict[str, str], body: bytes, ident: str | None = None) -> WebReply:
        q: dict[str, str] = {"all_users": "1"}
        if ident:
            q["ids"] = _job_id(ident)
        for key, ours in (("users", "users"), ("account", "accounts"), ("partition", "partitions"),
                          ("job_name", "names"), ("qos", "qos"), ("state", "states")):
            if query.get(key):
                q[ours] = query[key]
        for key in ("start_time", "end_time"):
            if query.get(key):
                q[key.split("_")[0]] = str(_when(query[key], key))
        if "start" not in q and not ident:
            q["start"] = "0"
        target = "/v1/accounting?" + urlencode(q)
        rows = self.call(caller, "GET", target, source="slurmdb_jobs_get")["records"]
        jobs: list[dict[str, Any]] = []
        steps: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            rid = str(r.get("job_id_raw") or r.get("job_id"))
            if "." in rid:
                steps.setdefault(rid.split(".")[0], []).append(r)
            else:
                jobs.append(r)
        out = [shapes.db_job(r, steps.get(str(r.get("job_id_raw") or r.get("job_id")), []), self.cluster)
               for r in jobs]
        if ident and not out:
            raise RestError(f"Invalid job id specified: {ident}", ERRNO["NotFound"], 500, "slurmdb_jobs_get")
        return _reply(200, shapes.envelope(jobs=out))


# ---------------------------------------------------------------------- helpers
def _now() -> float:
    return time.time()


_STARTED = time.time()


def _histogram(h: Any) -> tuple[int, float]:
    """(count, sum) of a prometheus-client Histogram without labels."""
    count, total = 0, 0.0
    for metric in h.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                count = int(sample.value)
            elif sample.name.endswith("_sum"):
                total = float(sample.value)
    return count, total


def _uid(user: str) -> int | None:
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def _json(body: bytes) -> Any:
    try:
        doc = json.loads(body or b"null", parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (ValueError, RecursionError):
        raise RestError("Unable to parse query.", ERRNO["InvalidRequest"], 400, "rest") from None
    if not isinstance(doc, dict):
        raise RestError("the request body must be a JSON object", ERRNO["InvalidRequest"], 400, "rest")
    return doc


def _job_id(text: str) -> str:
    if not re.fullmatch(r"\d+(_\d+)?", text or ""):
        raise RestError(f"Invalid job id specified: {text}", ERRNO["NotFound"], 500, "slurm_load_job")
    return text


def _job_errors(reply: dict[str, Any], source: str, prefix: str = "") -> None:
    errs = reply.get("errors") or []
    if errs:
        msg = str(errs[0].get("message"))
        number = 2002 if "permission" in msg.lower() else ERRNO["NotFound"] if "Invalid job id" in msg else 1
        raise RestError(prefix + msg, number, 500, source)


def _when(text: str, key: str) -> int:
    """A slurmdb time filter: epoch seconds, or a time as sacct reads it."""
    if text.isdigit():
        return int(text)
    from batchd.slurm import slurmtime
    try:
        return int(slurmtime.parse_begin(text))
    except ValueError:
        raise RestError(f"Invalid {key}: {text}", ERRNO["InvalidRequest"], 500, "slurmdb_jobs_get") from None


# ---------------------------------------------------------------------- submission
#: v0.0.38_job_properties -> sbatch's option key (a value given as text, the way sbatch reads it)
_AS_OPTION = {
    "account": "account", "array": "array", "comment": "comment", "constraints": "constraint",
    "cpus_per_gpu": "cpus_per_gpu", "cpus_per_task": "cpus_per_task", "dependency": "dependency",
    "gpus": "gpus", "gpus_per_node": "gpus_per_node", "gpus_per_task": "gpus_per_task", "gres": "gres",
    "mail_type": "mail_type", "mail_user": "mail_user", "memory_per_cpu": "mem_per_cpu",
    "memory_per_gpu": "mem_per_gpu", "memory_per_node": "mem", "nice": "nice", "open_mode": "open_mode",
    "partition": "partition", "qos": "qos", "reservation": "reservation", "signal": "signal",
    "standard_error": "error", "standard_input": "input", "standard_output": "output", "tasks": "ntasks",
    "tasks_per_node": "ntasks_per_node", "time_limit": "time", "time_minimum": "time_min", "licenses": "_licenses",
}
#: read here, not by the option grammar
_OWN = {"name", "environment", "current_working_directory", "argv", "hold", "requeue", "nodes", "begin_time",
        "exclusive"}
#: properties of the schema batchd takes and ignores (as sbatch ignores their options)
_IGNORED = {"account_gather_frequency", "batch_features", "burst_buffer", "cluster_constraint", "container",
            "core_specification", "cores_per_socket", "cpu_binding", "cpu_binding_hint", "cpu_frequency",
            "deadline", "delay_boot", "distribution", "get_user_environment", "gpu_binding", "gpu_frequency",
            "gpus_per_socket", "gres_flags", "kill_on_invalid_dependency", "mcs_label", "memory_binding",
            "minimum_cpus_per_node", "minimum_nodes", "no_kill", "oversubscribe", "prefer", "priority",
            "sockets_per_node", "spread_job", "tasks_per_core", "tasks_per_socket", "thread_specification",
            "threads_per_core", "wait_all_nodes", "wckey"}


def _text(key: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, str | int):
        raise RestError(f"job property {key}: expected a string or an integer, got {json.dumps(v)[:40]}",
                        ERRNO["InvalidRequest"], 500, "slurm_submit_batch_job")
    return str(v)


def submission_spec(doc: dict[str, Any], caller: Caller, cfg: Any) -> dict[str, Any]:
    """A `v0.0.38_job_submission` -> the JOB_SPEC sbatch would send for the same options."""
    script = doc.get("script")
    if doc.get("jobs") is not None:
        raise RestError("heterogeneous jobs (\"jobs\") are not supported by batchd", 2000, 500,
                        "slurm_submit_batch_job")
    if not isinstance(script, str) or not script:
        raise RestError("Job script not specified", 2009, 500, "slurm_submit_batch_job")
    props = doc.get("job")
    if not isinstance(props, dict):
        raise RestError("job properties (\"job\") not specified", 2000, 500, "slurm_submit_batch_job")
    unknown = sorted(set(props) - set(_AS_OPTION) - _OWN - _IGNORED)
    if unknown:
        raise RestError(f"unknown job property: {unknown[0]}", ERRNO["InvalidRequest"], 500, "slurm_submit_batch_job")
    env = props.get("environment")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise RestError("job property environment: an object of strings is required (e.g. {\"PATH\": \"/bin\"})",
                        ERRNO["InvalidRequest"], 500, "slurm_submit_batch_job")
    v: dict[str, Any] = {opt: _text(key, props[key]) for key, opt in _AS_OPTION.items() if props.get(key) is not None}
    if props.get("nodes") is not None:
        nodes = props["nodes"]
        if not isinstance(nodes, list) or not 1 <= len(nodes) <= 2 or not all(
                isinstance(n, int) and not isinstance(n, bool) for n in nodes):
            raise RestError("job property nodes: [min] or [min, max] node counts", ERRNO["InvalidRequest"], 500,
                            "slurm_submit_batch_job")
        v["nodes"] = "-".join(str(n) for n in nodes)
    if props.get("hold"):
        v["hold"] = True
    if props.get("exclusive") not in (None, False, "", "oversubscribe"):
        v["exclusive"] = True
    try:
        spec = jobopts.build_spec(v)
    except jobopts.OptionError as e:
        raise RestError(e.message.removeprefix(f"{jobopts.PROG}: error: ").removeprefix(f"{jobopts.PROG}: fatal: "),
                        ERRNO["InvalidRequest"], 500, "slurm_submit_batch_job") from None
    if props.get("requeue") is not None:
        spec["requeue"] = bool(props["requeue"])
    if props.get("begin_time") is not None:
        if not isinstance(props["begin_time"], int) or isinstance(props["begin_time"], bool):
            raise RestError("job property begin_time: epoch seconds", ERRNO["InvalidRequest"], 500,
                            "slurm_submit_batch_job")
        spec["begin_time"] = float(props["begin_time"])
    cwd = props.get("current_working_directory")
    if cwd is None:
        try:
            cwd = pwd.getpwuid(caller.uid).pw_dir
        except KeyError:
            cwd = "/"
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        raise RestError("job property current_working_directory: an absolute path", ERRNO["InvalidRequest"], 500,
                        "slurm_submit_batch_job")
    argv = props.get("argv") or []
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise RestError("job property argv: a list of strings", ERRNO["InvalidRequest"], 500, "slurm_submit_batch_job")
    name = props.get("name")
    spec.update({
        "name": name if isinstance(name, str) and name else "sbatch", "unnamed": not name, "script": script,
        "script_path": None, "argv": argv[1:], "submit_dir": cwd, "workdir": os.path.normpath(cwd),
        "export": "ALL", "environment": dict(env), "submit_host": socket.gethostname().split(".")[0], "wrap": False,
        "parsable": False, "clusters": None, "uid": None, "gid": None,
    })
    return spec


def update_changes(props: dict[str, Any]) -> dict[str, Any]:
    """A `v0.0.38_job_properties` update -> /v1/jobs/update's changes (what `scontrol
    update` changes: time limit, nice, account, name, comment, partition, QOS, begin)."""
    known = {"time_limit", "nice", "account", "name", "comment", "partition", "qos", "begin_time", "environment"}
    unknown = sorted(set(props) - known)
    if unknown:
        raise RestError(f"job property {unknown[0]} cannot be updated (time_limit, nice, account, name, "
                        "comment, partition, qos, begin_time)", ERRNO["InvalidRequest"], 500, "slurm_update_job")
    out: dict[str, Any] = {}
    for key in ("account", "name", "comment", "partition", "qos"):
        if key in props:
            if not isinstance(props[key], str):
                raise RestError(f"job property {key}: a string", ERRNO["InvalidRequest"], 500, "slurm_update_job")
            out[key] = props[key]
    for key, ours, mult in (("time_limit", "time_limit_s", 60), ("nice", "nice", 1), ("begin_time", "begin_time", 1)):
        if key in props:
            val = props[key]
            if isinstance(val, bool) or not isinstance(val, int):
                raise RestError(f"job property {key}: an integer", ERRNO["InvalidRequest"], 500, "slurm_update_job")
            out[ours] = val * mult
    if not out:
        raise RestError("nothing to update", ERRNO["InvalidRequest"], 500, "slurm_update_job")
    return out
