"""`batchd serve`: wire the store, the service, the socket API, the controller and the
node agent together, and run until SIGTERM/SIGINT.

Start-up order matters for "restarts never kill or double-start jobs" and for "the
socket answers at once": the store is checked (at head), the nodes are registered, and
the socket opens (systemd hears READY=1 then). The loop's first pass is the agent's:
it reconciles the spool with the store (re-adopting live runs, recording finished
ones) and launches the runs placed before the restart, each once; only then does the
first scheduling cycle run. Commands are answered all that time, however long the
launch backlog. Stopping the daemon never stops jobs: each job runs under its own
supervisor in its own session.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from batchd import memtrim
from batchd.config import Config
from batchd.control import nodehealth
from batchd.control.controller import Controller
from batchd.errors import BatchdError, ConfigError
from batchd.layout import prepare_state_dir
from batchd.metrics import CYCLE_FAILURES, CYCLE_SECONDS, PREEMPTIONS
from batchd.model import Node
from batchd.node.agent import Agent
from batchd.node.wakeup import WakeListener
from batchd.server.httpserver import ApiServer, Limits
from batchd.server.service import Service
from batchd.server.weblistener import Route, WebListener, WebReply, WebRequest
from batchd.store import Store
from batchd.store.dberrors import DB_ERRORS
from batchd.store.leader import Leadership, Notifier
from batchd.store.migrate import check_at_head, upgrade

log = logging.getLogger(__name__)

#: how often freed heap pages are given back to the system (malloc_trim: milliseconds)
TRIM_INTERVAL_S = 30

AGENT_PERIOD_S = 0.25
HEARTBEAT_S = 2.0
LEADER_POLL_S = 1.0
SCHEMA_CHECK_S = 60.0


def default_nodes(cfg: Config) -> list[str]:
    """The nodes this daemon is the agent of: every node in dev mode or on SQLite (one
    process plays the whole cluster), else the config node named like this host."""
    if cfg.dev or not cfg.db_url().startswith("postgresql"):
        return [n.name for n in cfg.nodes]
    host = socket.gethostname().split(".")[0]
    for n in cfg.nodes:
        if n.name == host:
            return [host]
    raise ConfigError(f"this host ({host}) is not a node of {cfg.path}; start with --node NAME")


#: Test hook, off by default, never for production: with this variable set to "1" the
#: daemon dies (os._exit, as a SIGKILL would) right after a submission's transaction
#: committed and before its reply is sent, so tests can lose a reply on purpose.
CRASH_AFTER_SUBMIT_ENV = "BATCHD_TEST_CRASH_AFTER_SUBMIT"


def _crashing_after(submit: Any) -> Any:
    def wrapped(caller: Any, spec: Any) -> Any:
        reply = submit(caller, spec)
        if reply.get("job_id") is not None and not reply.get("duplicate"):
            log.warning("test hook %s: dying after the commit of job_id=%s", CRASH_AFTER_SUBMIT_ENV, reply["job_id"])
            logging.shutdown()
            os._exit(137)
        return reply
    return wrapped


def sd_notify(message: str) -> None:
    """Tell systemd (Type=notify) about our state; a no-op outside systemd."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        try:
            s.connect(addr)
            s.sendall(message.encode())
        except OSError as e:
            log.warning("sd_notify failed error=%s", e)


def node_inventory(cfg: Config, name: str) -> list[dict[str, Any]]:
    """The node's GPUs in the snapshot's form: the static list of the config, or what
    NVML finds (zero GPUs, with a log line, where there is no driver)."""
    n = cfg.node(name)
    if isinstance(n.gpus, str):  # "nvml", the only text the config takes
        from batchd.node.nvml import discover

        return discover(cfg.gpu_aliases).to_snapshot_gpus()
    return list(n.gpus)


class Daemon:
    def __init__(self, cfg: Config, node_names: list[str] | None = None):
        self.cfg = cfg
        # a pooled connection per API thread, plus the cycle, the agents and the heartbeat
        self.store = Store(cfg.db_url(), pool_size=Limits.of(cfg.limits).api_threads + 4)
        self.wake_event = threading.Event()
        self.wake_listener: WakeListener | None = None
        self.stop_event = threading.Event()
        self.node_names = node_names or default_nodes(cfg)
        self.leadership = Leadership(cfg.db_url(), self.node_names[0])
        self.notifier = Notifier(cfg.db_url(), lambda _payload: self._hard_wake())
        self.controller = Controller(cfg, self.store)
        self.service = Service(cfg, self.store, wake=self.wake, snapshot=self.controller.snapshot,
                               controller=self.controller_status, decisions=lambda: self.controller.last_decisions)
        self.agent = Agent(cfg, self.store, self.node_names, on_change=self.wake_event.set)
        # a wake-up from a request (submit, cancel, update) since the last cycle began: only
        # a cycle such wake-ups started makes the next ones wait (`_cycle_gap_left`); one the
        # periodic tick or a job's end started does not, so a submission right after it
        # starts at once
        self._requested = False
        self._gap_applies = False
        if os.environ.get(CRASH_AFTER_SUBMIT_ENV) == "1":
            self.service.submit = _crashing_after(self.service.submit)  # type: ignore[method-assign]
        self.api: ApiServer | None = None
        self.web: WebListener | None = None
        self._scheduler: Any = None
        self._last_leader_poll = 0.0
        self._last_heartbeat = 0.0
        self._schema_ok = True
        self._last_schema_check = 0.0
        self._last_cycle_end = 0.0  # time.monotonic() at the end of the last cycle
        self._last_cycle_s = 0.0  # how long it took

    def wake(self) -> None:
        """Something changed (a submit, an exit): run a cycle here and, with several
        nodes, wake the controller and the agents wherever they are."""
        self._hard_wake()
        self.notifier.notify("wake")

    def _hard_wake(self) -> None:
        self._requested = True
        self.wake_event.set()

    def _tick(self) -> None:
        """The periodic cycle (`interval_s`): a wake-up that starts no burst."""
        self.wake_event.set()
        self.notifier.notify("wake")

    def controller_status(self) -> dict[str, Any]:
        h = self.leadership.holder()
        h["this_node"] = self.node_names[0]
        h["this_is_controller"] = self.leadership.is_leader()
        return h

    def prepare(self) -> None:
        prepare_state_dir(self.cfg)  # creates what is missing; a root daemon refuses a layout jobs cannot use
        if self.cfg.dev:
            upgrade(self.store.engine)  # dev mode migrates by itself; production asks for `batchd migrate`
        check_at_head(self.store.engine)
        self.store.ensure_default_account()
        if self.cfg.accounts_file:
            self._apply_accounts_file(self.cfg.accounts_file)
        now = time.time()
        for name in self.node_names:
            c = self.cfg.node(name)
            self.store.upsert_node(Node(name=name, state="IDLE", cpus=c.cpus, memory_mb=c.memory_mb,
                                        gpus=node_inventory(self.cfg, name), heartbeat=now))
        if self.cfg.dev:
            self.store.delete_nodes_except([n.name for n in self.cfg.nodes])
        # no agent pass here: the loop's first pass reconciles (and launches the backlog)
        # before its first cycle, with the socket already answering
        self.store.heartbeat(self.node_names, time.time())

    def _apply_accounts_file(self, path: str) -> None:
        import tomllib

        from batchd.server.accounts import apply_doc
        from batchd.server.service import Caller

        with open(path, "rb") as f:
            doc = tomllib.load(f)
        res = apply_doc(self.service, Caller(uid=0, gid=0), doc, dry_run=False)
        for line in res["changes"]:
            log.info("accounts file change=%r file=%s", line, path)

    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        self.prepare()
        self.api = ApiServer(self.cfg.socket, self.service)
        self.api.start()
        self.web = self._web_listener()
        self.web.start()
        sd_notify("READY=1")  # the socket answers from here on
        self._scheduler = BackgroundScheduler(daemon=True)
        self._scheduler.add_job(self._tick, "interval", seconds=self.cfg.interval_s, id="cycle",
                                max_instances=1, coalesce=True)
        if self.cfg.rollup_interval_s > 0:
            self._scheduler.add_job(self._rollup, "interval", seconds=self.cfg.rollup_interval_s, id="rollup",
                                    max_instances=1, coalesce=True)
        # freed heap pages back to the system: after a queue of 10,000 jobs is cancelled, the
        # cycles' and requests' objects are gone but glibc keeps their pages (batchd.memtrim)
        self._scheduler.add_job(memtrim.give_back, "interval", seconds=TRIM_INTERVAL_S, id="trim",
                                max_instances=1, coalesce=True)
        self._scheduler.start()
        self.notifier.start()
        # a run's supervisor says when the run ended: its end is recorded (and the cycle
        # that follows runs) at once, not at the agent's next pass
        self.wake_listener = WakeListener(self.agent.spool, self.wake_event.set)
        self.wake_listener.start()
        self.loop_thread = threading.Thread(target=self._loop, name="loop", daemon=True)
        self.loop_thread.start()
        log.info("batchd started cluster=%s socket=%s nodes=%s db=%s", self.cfg.cluster_name, self.cfg.socket,
                 ",".join(self.node_names), self.store.engine.url.render_as_string(hide_password=True))

    def _web_listener(self) -> WebListener:
        """`[http] listen`: GET /metrics (batchd.server.metrics), the slurmrestd API
        (batchd.server.slurmrest), the dashboard under /ui/ (batchd.server.dashboard)."""
        from batchd.server.metrics import ClusterCollector, render

        collector = ClusterCollector(self.store, self.cfg, controller=self.controller_status,
                                     decisions=lambda: self.controller.last_decisions,
                                     gpu_samples=self.agent.sampler.latest)

        def metrics(req: WebRequest) -> WebReply:
            body, ctype = render(collector, req.header("Accept"))
            return WebReply(200, body, ctype)

        from batchd.server.dashboard import Dashboard
        from batchd.server.slurmrest import SlurmRest

        rest = SlurmRest(self.service)
        dash = Dashboard(self.service, secure=bool(self.cfg.http.get("tls_cert")))
        limits = Limits.of(self.cfg.limits)

        def home(req: WebRequest) -> WebReply:
            return WebReply(303, b"", "text/plain", {"Location": "/ui/"}) if req.path == "/" else \
                WebReply(404, b"no such endpoint\n", "text/plain")

        routes: dict[str, Route] = {"/metrics": metrics, "/slurm/": rest, "/slurmdb/": rest, "/ui": dash,
                                    "/ui/": dash, "/": home}
        return WebListener(self.cfg.http, routes, timeout_s=float(limits.request_timeout_s),
                           max_body=int(limits.max_request_bytes))

    def _rollup(self) -> None:
        """Hourly usage rollups for reports, on the controller (a racing second rollup on
        PostgreSQL rolls back, so nothing is counted twice)."""
        if not self.leadership.is_leader():
            return
        from batchd.accounting.rollup import run_rollup

        try:
            n = run_rollup(self.store)
            if n:
                log.info("usage rolled up records=%d", n)
        except Exception:  # the top of a periodic job: log, the next one retries
            log.exception("rollup failed")

    def _is_controller(self, now: float) -> bool:
        """Whether this daemon schedules: polls the controller lock at most once per
        LEADER_POLL_S (on SQLite always true); a new holder checks the schema first."""
        if now - self._last_leader_poll >= LEADER_POLL_S:
            self._last_leader_poll = now
            was = self.leadership.is_leader()
            if self.leadership.poll() and (not was or now - self._last_schema_check >= SCHEMA_CHECK_S):
                # on taking the role, and every minute while holding it: a database that
                # another node migrated past this daemon's code stops this controller
                self._last_schema_check = now
                self._schema_ok = self._check_schema()
        return self.leadership.is_leader() and self._schema_ok

    def _check_schema(self) -> bool:
        """A controller on an older (or newer) schema than the database's refuses to
        schedule and says why; the agent part goes on."""
        try:
            check_at_head(self.store.engine)
            return True
        except BatchdError as e:
            if e.code in DB_ERRORS:
                raise  # the database did not answer: no verdict on its schema (the loop logs it)
            log.error("not scheduling: %s", e.message)
            return False

    def _cycle_gap_left(self) -> float:
        """Seconds until the next cycle may start: the gap after the last cycle is the
        configured `cycle_min_gap_s`, or that cycle's own duration when longer (so that
        cycles take at most about half the daemon's time under a burst); none after a cycle
        that requests did not start (the tick, a job's end)."""
        if not self._gap_applies:
            return 0.0
        gap = max(self.cfg.cycle_min_gap_s, self._last_cycle_s)
        return self._last_cycle_end + gap - time.monotonic()

    def _loop(self) -> None:
        self.wake_event.set()
        while not self.stop_event.is_set():
            woke = self.wake_event.is_set() or self.wake_event.wait(AGENT_PERIOD_S)
            if woke and self._cycle_gap_left() > 0:
                # Coalescing: a wake-up within the gap after the last cycle waits for its
                # end (the agent still passes every AGENT_PERIOD_S); the submissions
                # arriving meanwhile only set the event again and the next cycle takes
                # them all. After a quiet spell the gap is long over and a cycle starts at
                # once, which keeps submit -> start on an idle node short.
                self.stop_event.wait(min(self._cycle_gap_left(), AGENT_PERIOD_S))
                woke = self._cycle_gap_left() <= 0  # not yet: the event stays set
            now = time.time()
            try:
                if now - self._last_heartbeat >= HEARTBEAT_S:
                    self._last_heartbeat = now
                    self.store.heartbeat(self.node_names, now)
                ended = self.agent.step()
                was_controller = self.leadership.is_leader()
                if self._is_controller(now) and (woke or ended or not was_controller):
                    # a new controller runs its first cycle at once
                    self.wake_event.clear()
                    # a controller that just took over first gives every agent one node
                    # timeout to heartbeat, so a cluster restarting together loses no node
                    if now - (self.leadership.since or now) >= nodehealth.node_timeout_s(self.cfg):
                        nodehealth.check_nodes(self.cfg, self.store, now)
                    t0 = time.monotonic()
                    self._gap_applies, self._requested = self._requested, False
                    try:
                        dec = self.controller.cycle()
                    except Exception:
                        CYCLE_FAILURES.inc()
                        raise
                    finally:
                        self._last_cycle_end = time.monotonic()
                        self._last_cycle_s = self._last_cycle_end - t0
                        CYCLE_SECONDS.observe(self._last_cycle_s)
                    for p in dec.get("preempt") or ():  # a few per cycle at most: one read each
                        victim = self.store.get_job(int(p["job"]))
                        PREEMPTIONS.labels(reason=str(p.get("reason") or "preempt"),
                                           account=victim.account if victim else "").inc()
                    if dec.get("start") or dec.get("preempt"):
                        self.notifier.notify("agents")
                    # launch what the cycle started without waiting for the next tick
                    self.agent.step()
                elif woke:
                    self.wake_event.clear()
            except Exception:  # the top of a cycle: log and go on with the next one
                self.agent.log_failure("cycle failed")
                time.sleep(1)

    def stop(self) -> None:
        sd_notify("STOPPING=1")
        self.stop_event.set()
        self.notifier.stop()
        if self.wake_listener is not None:
            self.wake_listener.stop()
        self.leadership.release()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
        if self.api is not None:
            self.api.stop()
        if self.web is not None:
            self.web.stop()
        self.store.close()
        log.info("batchd stopped (running jobs keep running)")

    def run_forever(self, on_ready: Callable[[], None] | None = None) -> None:
        """Start (migrations in dev mode, then the socket), call `on_ready` once the socket
        answers, and run until SIGTERM or SIGINT."""
        self.start()
        if on_ready is not None:
            on_ready()
        done = threading.Event()

        def _stop(signum: int, _frame: Any) -> None:
            log.info("signal received signal=%s", signal.Signals(signum).name)
            done.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        while not done.wait(1.0):
            pass
        self.stop()
