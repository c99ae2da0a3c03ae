"""`batchd serve`: wire the store, the service, the socket API, the controller and the
node agent together, and run until SIGTERM/SIGINT.

Start-up order matters for "restarts never kill or double-start jobs": the store is
checked (at head), the nodes are registered, the agent reconciles the spool with the
store (re-adopting live runs and recording finished ones), and only then does the
first scheduling cycle run. Stopping the daemon never stops jobs: each job runs under
its own supervisor in its own session.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from batchd.agent import Agent
from batchd.api import ApiServer
from batchd.config import Config
from batchd.controller import Controller
from batchd.model import Node
from batchd.service import Service
from batchd.store import Store
from batchd.store.migrate import check_at_head, upgrade

log = logging.getLogger(__name__)

AGENT_PERIOD_S = 0.25


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
    if n.gpus == "nvml":
        from batchd.nvml import discover

        return discover(cfg.gpu_aliases).to_snapshot_gpus()
    return list(n.gpus)


class Daemon:
    def __init__(self, cfg: Config, node_names: list[str] | None = None):
        self.cfg = cfg
        self.store = Store(cfg.db_url())
        self.wake_event = threading.Event()
        self.stop_event = threading.Event()
        self.node_names = node_names or [n.name for n in cfg.nodes]
        self.controller = Controller(cfg, self.store)
        self.service = Service(cfg, self.store, wake=self.wake, snapshot=self.controller.snapshot)
        self.agent = Agent(cfg, self.store, self.node_names, on_change=self.wake)
        self.api: ApiServer | None = None
        self._scheduler: Any = None

    def wake(self) -> None:
        self.wake_event.set()

    def prepare(self) -> None:
        os.makedirs(self.cfg.state_dir, mode=0o700, exist_ok=True)
        if self.cfg.dev:
            upgrade(self.store.engine)  # dev mode migrates by itself; production asks for `batchd migrate`
        check_at_head(self.store.engine)
        self.store.ensure_default_account()
        now = time.time()
        for name in self.node_names:
            c = self.cfg.node(name)
            self.store.upsert_node(Node(name=name, state="IDLE", cpus=c.cpus, memory_mb=c.memory_mb,
                                        gpus=node_inventory(self.cfg, name), heartbeat=now))
        if self.cfg.dev:
            self.store.delete_nodes_except([n.name for n in self.cfg.nodes])
        self.agent.step()  # reconcile before the first cycle

    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        self.prepare()
        self.api = ApiServer(self.cfg.socket, self.service)
        self.api.start()
        self._scheduler = BackgroundScheduler(daemon=True)
        self._scheduler.add_job(self.wake, "interval", seconds=self.cfg.interval_s, id="cycle",
                                max_instances=1, coalesce=True)
        self._scheduler.start()
        self.loop_thread = threading.Thread(target=self._loop, name="loop", daemon=True)
        self.loop_thread.start()
        log.info("batchd started cluster=%s socket=%s nodes=%s db=%s", self.cfg.cluster_name, self.cfg.socket,
                 ",".join(self.node_names), self.store.engine.url.render_as_string(hide_password=True))
        sd_notify("READY=1")

    def _loop(self) -> None:
        self.wake_event.set()
        while not self.stop_event.is_set():
            woke = self.wake_event.wait(AGENT_PERIOD_S)
            try:
                ended = self.agent.step()
                if woke or ended:
                    self.wake_event.clear()
                    self.controller.cycle()
                    # launch what the cycle started without waiting for the next tick
                    self.agent.step()
            except Exception:  # the top of a cycle: log and go on with the next one
                log.exception("cycle failed")
                time.sleep(1)

    def stop(self) -> None:
        sd_notify("STOPPING=1")
        self.stop_event.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
        if self.api is not None:
            self.api.stop()
        self.store.close()
        log.info("batchd stopped (running jobs keep running)")

    def run_forever(self) -> None:
        self.start()
        done = threading.Event()

        def _stop(signum: int, _frame: Any) -> None:
            log.info("signal received signal=%s", signal.Signals(signum).name)
            done.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        while not done.wait(1.0):
            pass
        self.stop()
