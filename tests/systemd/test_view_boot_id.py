"""Run identity under a real systemd: the daemon sees another boot id than its job units.

systemd-nspawn gives a container a boot id of its own, mounted over
/proc/sys/kernel/random/boot_id, and with the unit's `ProtectKernelTunables=yes` the daemon
read another one than its job units: batchd then ended every running job as lost. The
same split is made here with a drop-in that bind-mounts another boot id over the daemon's
view only (`BindReadOnlyPaths=`); the job units keep the box's. A running job must stay
RUNNING through a restart of the daemon and end recorded once. (Before the fix, batchd at
632102d, the job was NODE_FAIL on the daemon's first pass, its unit stopped, and the job
requeued.) The drop-in is removed at the end.

The `box` fixture is per module: this file boots and installs a box of its own (about
25 s here).
"""

from __future__ import annotations

import time

import pytest

from tests.systemd.conftest import USERS

pytestmark = pytest.mark.systemd

OTHER_BOOT_ID = "33333333-3333-3333-3333-333333333333"
DROPIN = "/etc/systemd/system/batchd.service.d/zz-other-boot-id.conf"
HOLD = 'while [ ! -e "$HOME/go.$SLURM_JOB_ID" ]; do sleep 0.1; done; echo done'


def test_job_stays_running_when_the_daemon_sees_another_boot_id(box):
    user = USERS[0]
    box.sh(f"echo {OTHER_BOOT_ID} > /etc/batchd/other-boot-id && mkdir -p $(dirname {DROPIN}) && "
           f"printf '[Service]\\nBindReadOnlyPaths=/etc/batchd/other-boot-id:/proc/sys/kernel/random/boot_id\\n' "
           f"> {DROPIN} && systemctl daemon-reload && systemctl restart batchd")
    try:
        box.wait_answering()
        pid = box.sh("systemctl show -p MainPID --value batchd").stdout.strip()
        seen = box.sh(f"nsenter -t {pid} -m cat /proc/sys/kernel/random/boot_id").stdout.strip()
        real = box.sh("cat /proc/sys/kernel/random/boot_id").stdout.strip()
        assert seen == OTHER_BOOT_ID != real  # the split is real
        job = box.submit(user, HOLD, "-o", "view-%j.out")
        box.wait_state(job, ("RUNNING",))
        # several passes of the daemon's agent (one a second) over the running job
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert box.state(job) == "RUNNING"
            time.sleep(0.3)
        assert box.sh(f"systemctl is-active batchd-job-{job}.service").stdout.strip() == "active"
        box.sh("systemctl restart batchd")
        box.wait_answering()
        assert box.state(job) == "RUNNING"
        box.sh(f"touch go.{job}", user=user)
        assert box.wait_state(job, ("COMPLETED", "NODE_FAIL", "FAILED", "PENDING"), timeout=40) == "COMPLETED"
        assert box.records(job) == [f"{job}|COMPLETED|0:0"]
        assert box.sh(f"cat view-{job}.out", user=user).stdout == "done\n"
        log = box.sh("journalctl -u batchd --no-pager -o cat").stdout
        assert f"run alive in another view jobdir=/var/lib/batchd/spool/job.{job}.0" in log
    finally:
        box.sh(f"rm -f {DROPIN} /etc/batchd/other-boot-id && systemctl daemon-reload && systemctl restart batchd",
               check=False)
        box.wait_answering()
