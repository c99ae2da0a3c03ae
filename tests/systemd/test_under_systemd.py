"""batchd under a real systemd (PID 1 in the box of conftest.py), driven as a node is.

Each test states one property of the shipped unit or of the job units. Where the box
cannot enforce a limit (the host keeps memory/cpuset/pids in cgroup v1, so the box's
cgroup v2 has no controllers), the test checks the property is set, warns "not
enforceable here: ..." and skips the enforcement half with the same reason.
"""

from __future__ import annotations

import json
import re
import time
import warnings

import pytest

from tests.systemd.conftest import CONFIG, UPGRADE_VERSION, USERS, missing_reason

pytestmark = pytest.mark.systemd

A, B = USERS
#: a job that runs until `touch go.<id>` in its user's home
HOLD = 'while [ ! -e "$HOME/go.$SLURM_JOB_ID" ]; do sleep 0.1; done; id -un'
SUPERVISOR_MB = 64  # batchd.node.isolation.SUPERVISOR_MEMORY_MB


def _release(box, user: str, job_id: int) -> None:
    box.sh(f"touch go.{job_id}", user=user)


def _unit(job_id: int) -> str:
    return f"batchd-job-{job_id}.service"


def _unit_users(box, job_id: int) -> set[str]:
    """The users of the processes in the job unit's cgroup."""
    pids = box.sh(f"cat /sys/fs/cgroup/batchd.slice/{_unit(job_id)}/cgroup.procs").stdout.split()
    out = box.sh("ps -o user= -p " + ",".join(pids)).stdout.split() if pids else []
    return set(out)


def _cpu_ids(box, job_id: int) -> str:
    return re.search(r"CPU_IDs=(\S+)", box.sh(f"scontrol show job -d {job_id}").stdout).group(1)


def _gpu_idx(box, job_id: int) -> list[int]:
    m = re.search(r"GRES=\S*\(IDX:([0-9,-]+)\)", box.sh(f"scontrol show job -d {job_id}").stdout)
    if not m:
        return []
    out: list[int] = []
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _not_enforceable(what: str, reason: str) -> None:
    msg = f"not enforceable here: {what}: {reason}"
    warnings.warn(msg, stacklevel=2)
    print(msg)


def _finish(box, user: str, job_id: int) -> None:
    _release(box, user, job_id)
    assert box.wait_state(job_id, ("COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED")) == "COMPLETED"
    assert len(box.records(job_id)) == 1, box.records(job_id)


def test_install_as_readme_says(box):
    """The README block ran (the fixture); what it left is a node as designed."""
    assert box.sh("systemctl is-enabled batchd").stdout.strip() == "enabled"
    assert box.sh("systemctl is-active batchd").stdout.strip() == "active"
    assert box.sh("stat -c %a /var/lib/batchd /var/lib/batchd/spool /var/lib/batchd/batchd.db "
                  "/run/batchd").stdout.split() == ["711", "711", "600", "755"]
    # only batchd's commands are linked: the system's python3 is not shadowed by the venv's
    assert box.sh("command -v python3").stdout.strip() == "/usr/bin/python3"
    assert box.sh("readlink /usr/local/bin/sbatch").stdout.strip() == "/opt/batchd/bin/sbatch"


def test_ready_only_once_the_socket_answers_and_the_schema_is_current(box):
    p = box.show("batchd", "Type", "NotifyAccess", "KillMode")
    assert (p["Type"], p["NotifyAccess"], p["KillMode"]) == (["notify"], ["main"], ["process"])
    # systemctl start returns on READY=1: the socket answers at once, without polling
    for _ in range(2):
        box.sh("systemctl restart batchd && sinfo -h && squeue -h")
    # a database behind the code: the unit does not become active, the journal says why
    box.sh("systemctl stop batchd && mv /var/lib/batchd/batchd.db /var/lib/batchd/db.moved")
    try:
        box.sh("python3 -c 'import sqlite3; sqlite3.connect(\"/var/lib/batchd/batchd.db\").close()' "
               "&& chmod 0600 /var/lib/batchd/batchd.db")
        r = box.sh("systemctl start batchd", check=False)
        assert r.returncode != 0
        assert box.sh("systemctl is-active batchd", check=False).stdout.strip() != "active"
        assert box.sh("sinfo -h", check=False).returncode != 0
        # ExecStartPre's `batchd migrate --check` says so, as an error (PRIORITY 3)
        said = [json.loads(ln) for ln in box.sh("journalctl -u batchd -n 30 -o json --no-pager").stdout.splitlines()]
        refusals = [d for d in said if "batchd migrate" in d.get("MESSAGE", "") and d.get("_COMM") != "systemd"]
        assert refusals and {d["PRIORITY"] for d in refusals} == {"3"}, said
    finally:
        box.sh("systemctl stop batchd; systemctl reset-failed batchd; rm -f /var/lib/batchd/batchd.db; "
               "mv /var/lib/batchd/db.moved /var/lib/batchd/batchd.db && systemctl start batchd")
    box.sh("sinfo -h")


def test_jobs_of_two_users_run_as_them_in_their_own_units(box, controllers):
    ja = box.submit(A, HOLD, "--mem=100M", "-c", "2", "--gres=gpu:1")
    jb = box.submit(B, HOLD, "--mem=200M", "-c", "1")
    try:
        for j in (ja, jb):
            box.wait_state(j, ("RUNNING",))
        for j, user, mem in ((ja, A, 100), (jb, B, 200)):
            p = box.show(_unit(j), "ActiveState", "Slice", "MemoryMax", "MemorySwapMax", "AllowedCPUs",
                         "DevicePolicy", "DeviceAllow", "KillMode", "OOMPolicy", "ControlGroup")
            assert p["ActiveState"] == ["active"] and p["Slice"] == ["batchd.slice"], p
            assert p["MemoryMax"] == [str((mem + SUPERVISOR_MB) * 1024 * 1024)], p
            assert p["MemorySwapMax"] == ["0"] and p["KillMode"] == ["control-group"], p
            assert p["DevicePolicy"] == ["closed"] and p["OOMPolicy"] == ["continue"], p
            assert p["ControlGroup"] == [f"/batchd.slice/{_unit(j)}"], p
            cpus = _cpu_ids(box, j)
            assert p["AllowedCPUs"] == [cpus], (p, cpus)
            gpus = _gpu_idx(box, j)
            want = ({f"/dev/nvidia{i} rw" for i in gpus}
                    | ({"/dev/nvidiactl rw", "/dev/nvidia-uvm rw", "/dev/nvidia-uvm-tools rw"} if gpus else set()))
            assert set(p["DeviceAllow"]) - {""} == want, (p, gpus)
            assert (len(gpus), user in _unit_users(box, j)) == ((1 if j == ja else 0), True)
    finally:
        for j, u in ((ja, A), (jb, B)):
            _release(box, u, j)
    for j, u in ((ja, A), (jb, B)):
        assert box.wait_state(j, ("COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED")) == "COMPLETED"
        assert box.sh(f"cat slurm-{j}.out", user=u).stdout == f"{u}\n"
    for ctl, what in (("memory", "MemoryMax/MemorySwapMax"), ("cpuset", "AllowedCPUs"), ("pids", "TasksMax")):
        if ctl not in controllers:
            _not_enforceable(what, missing_reason(ctl, controllers))


def test_memory_limit_is_enforced(box, controllers):
    if "memory" not in controllers:
        pytest.skip(f"not enforceable here: MemoryMax: {missing_reason('memory', controllers)}")
    j = box.submit(A, "python3 -c 'b = bytearray(400 * 2**20); print(len(b))'", "--mem=100M")
    assert box.wait_state(j, ("COMPLETED", "FAILED", "OUT_OF_MEMORY"), timeout=60) == "OUT_OF_MEMORY"


def test_cpus_are_enforced(box, controllers):
    if "cpuset" not in controllers:
        pytest.skip(f"not enforceable here: AllowedCPUs: {missing_reason('cpuset', controllers)}")
    j = box.submit(A, "python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))'", "-c", "1")
    assert box.wait_state(j, ("COMPLETED", "FAILED")) == "COMPLETED"
    assert box.sh(f"cat slurm-{j}.out", user=A).stdout.strip() == f"[{_cpu_ids(box, j)}]"


DEVICE_PROBE = """python3 - <<'P'
import os
for i in range(4):
    try:
        os.close(os.open(f"/dev/nvidia{i}", os.O_RDWR))
        print(i, "opened")
    except OSError as e:
        print(i, e.errno)
P"""


def test_a_job_cannot_open_a_device_it_was_not_given(box):
    """DevicePolicy=closed + DeviceAllow of its card, enforced by the kernel: the fake
    /dev/nvidiaN (major 195, no driver) gives ENXIO (6) where the cgroup lets the open
    through and EPERM (1) where it refuses."""
    j = box.submit(A, DEVICE_PROBE, "--gres=gpu:1")
    assert box.wait_state(j, ("COMPLETED", "FAILED")) == "COMPLETED"
    (given,) = _gpu_idx(box, j)
    got = dict(line.split() for line in box.sh(f"cat slurm-{j}.out", user=A).stdout.splitlines())
    assert got == {str(i): ("6" if i == given else "1") for i in range(4)}, (given, got)
    # outside any job unit the same opens get ENXIO everywhere: the refusal is the job's cgroup
    assert box.sh("cat /dev/nvidia1 2>&1 || true").stdout.strip().endswith("No such device or address")


def test_restart_and_kill9_keep_running_jobs_recorded_once(box):
    j = box.submit(B, HOLD)
    box.wait_state(j, ("RUNNING",))
    before = box.show(_unit(j), "MainPID")["MainPID"]
    box.sh("systemctl restart batchd")
    assert box.state(j) == "RUNNING"
    main = box.show("batchd", "MainPID")["MainPID"][0]
    box.sh(f"kill -9 {main}")
    box.wait_answering(timeout=30)  # Restart=on-failure, RestartSec=2s
    assert box.show("batchd", "MainPID")["MainPID"][0] != main
    assert box.show(_unit(j), "ActiveState", "MainPID") == {"ActiveState": ["active"], "MainPID": before}
    assert box.state(j) == "RUNNING"
    _finish(box, B, j)


def test_stop_does_not_kill_jobs(box):
    j = box.submit(A, HOLD)
    box.wait_state(j, ("RUNNING",))
    box.sh("systemctl stop batchd")
    try:
        assert box.show(_unit(j), "ActiveState")["ActiveState"] == ["active"]
        assert A in _unit_users(box, j)
        _release(box, A, j)  # it ends while no daemon runs
    finally:
        box.sh("systemctl start batchd")
    assert box.wait_state(j, ("COMPLETED", "FAILED", "NODE_FAIL")) == "COMPLETED"
    assert len(box.records(j)) == 1, box.records(j)
    assert box.sh(f"cat slurm-{j}.out", user=A).stdout == f"{A}\n"


def test_journal_carries_the_log_lines_with_their_priorities(box):
    cursor_out = box.sh("journalctl -u batchd -n 0 --show-cursor --no-pager").stdout
    cursor = cursor_out.strip().rsplit("cursor: ", 1)[-1]
    # an error: a root daemon refuses a database other users can read (one line, exit 1)
    box.sh("chmod 0644 /var/lib/batchd/batchd.db")
    try:
        assert box.sh("systemctl restart batchd", check=False).returncode != 0
    finally:
        box.sh("systemctl stop batchd; systemctl reset-failed batchd; chmod 0600 /var/lib/batchd/batchd.db; "
               "systemctl start batchd")
    # `systemctl start` returns at READY=1, and the daemon logs "batchd started" after that:
    # read the journal until the line is there (journald takes the stream in on its own time)
    deadline = time.monotonic() + 30
    while True:
        out = box.sh(f"journalctl -u batchd -o json --no-pager --after-cursor={cursor!r}").stdout
        lines = [(int(d["PRIORITY"]), d["MESSAGE"]) for d in map(json.loads, out.splitlines())
                 if d.get("_COMM") != "systemd" and d.get("SYSLOG_IDENTIFIER") == "batchd"]
        if any("batchd started" in m for _, m in lines) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    errors = [m for p, m in lines if m.startswith("batchd: error:")]
    assert errors and all(m.startswith("batchd: error:") for p, m in lines if p == 3), lines
    assert {p for p, m in lines if m.startswith("batchd: error:")} == {3}, lines
    started = [p for p, m in lines if "batchd started" in m]
    assert started and set(started) == {6}, lines
    assert not any(m.startswith("<") for _, m in lines), "a priority prefix was not stripped"
    # `journalctl -p err` (README) finds it: the whole journal of this box's boot
    errs = box.sh("journalctl -u batchd -p err -o cat --no-pager").stdout.splitlines()
    assert set(errors) <= set(errs), (errors, errs)


def test_node_check_names_systemd_isolation_and_why(box):
    out = box.sh(f"batchd node check --config {CONFIG}").stdout
    assert out.startswith("isolation: systemd\n"), out
    assert "why: systemd PID 1 + cgroup v2 + systemd-run + root" in out, out
    assert "jobs run in: systemd" in out, out


def test_upgrade_keeps_running_jobs(box):
    j = box.submit(A, HOLD)
    box.wait_state(j, ("RUNNING",))
    box.sh(f"/opt/batchd/bin/pip install -q --no-index -f /wheels -f /wheels-newer /wheels-newer/{box.newer.name} "
           f"&& batchd migrate --config {CONFIG} && systemctl restart batchd",
           env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"}, timeout=180)
    version = box.sh("/opt/batchd/bin/python -c 'import importlib.metadata as m; print(m.version(\"batchd\"))'")
    assert version.stdout.strip().endswith(UPGRADE_VERSION)
    assert box.state(j) == "RUNNING"
    _finish(box, A, j)


def test_scancel_ends_every_process_of_the_job_unit(box):
    """KillMode=control-group on the job's unit: a process the job detached (setsid) in
    its own session still ends with the job."""
    j = box.submit(B, 'setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > "$HOME/bg.$SLURM_JOB_ID"; sleep 300')
    box.wait_state(j, ("RUNNING",))
    deadline = time.monotonic() + 20
    while box.sh(f"test -s bg.{j}", user=B, check=False).returncode != 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    bg = box.sh(f"cat bg.{j}", user=B).stdout.strip()
    assert B in _unit_users(box, j)
    box.sh(f"scancel {j}", user=B)
    assert box.wait_state(j, ("CANCELLED", "COMPLETED", "FAILED")) == "CANCELLED"
    deadline = time.monotonic() + 30
    while box.sh(f"kill -0 {bg}", check=False).returncode == 0 or \
            box.sh(f"systemctl is-active {_unit(j)}", check=False).stdout.strip() in ("active", "deactivating"):
        assert time.monotonic() < deadline, f"pid {bg} of job {j} outlived its unit"
        time.sleep(0.2)
    assert len(box.records(j)) == 1, box.records(j)
