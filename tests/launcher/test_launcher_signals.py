"""Time limit, --signal, cancel, preemption, forwarded signals, memory limit, and the
processes a job leaves behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from batchd.node import launcher

# A job that logs the signals it gets and keeps running: SIGTERM does not end it.
STUBBORN = """#!/bin/bash
trap 'echo "got USR1 at $SECONDS"' USR1
trap 'echo "got TERM at $SECONDS"' TERM
echo started
while :; do sleep 0.05; done
"""


def _wait_for(path: Path, text: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"{text!r} never appeared in {path}")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_time_limit_sends_signal_then_term_then_kill(jobs):
    req, _ = jobs.launch(STUBBORN, time_limit_s=2, kill_wait_s=1, signal=(signal.SIGUSR1, 1))
    status = jobs.wait(req)
    out = Path(req.stdout).read_text()
    assert status.final_state == "TIMEOUT" and status.requested == "timeout"
    assert status.exit_code_str == "0:9"  # it trapped TERM, so SIGKILL ended it
    assert out.index("got USR1") < out.index("got TERM")
    assert 2.9 <= status.end_time - status.start_time < 8


def test_time_limit_job_that_obeys_term_is_still_timeout(jobs):
    status, _ = jobs.run("#!/bin/bash\nsleep 30\n", time_limit_s=1, kill_wait_s=5)
    assert status.final_state == "TIMEOUT" and status.exit_code_str == "0:15"
    assert status.end_time - status.start_time < 4


def test_no_time_limit_when_none_or_unlimited(jobs):
    for limit in (None, -1):
        status, _ = jobs.run("#!/bin/bash\nsleep 1.2\n", time_limit_s=limit)
        assert status.final_state == "COMPLETED"


def test_cancel(jobs):
    req, info = jobs.launch("#!/bin/bash\necho started\nsleep 30\n")
    _wait_for(Path(req.stdout), "started")
    launcher.terminate(jobs.spool, req.job_id, req.run, "cancel")
    status = jobs.wait(req, timeout_s=10)
    assert (status.final_state, status.requested, status.exit_code_str) == ("CANCELLED", "cancel", "0:15")
    assert _gone(info.pid)


def test_cancel_of_trapping_job_kills_after_grace(jobs):
    req, _ = jobs.launch(STUBBORN)
    _wait_for(Path(req.stdout), "started")
    t0 = time.time()
    launcher.terminate(jobs.spool, req.job_id, req.run, "cancel", grace_s=1)
    status = jobs.wait(req, timeout_s=10)
    assert status.final_state == "CANCELLED" and status.exit_code_str == "0:9"
    assert 0.9 <= status.end_time - t0 < 5
    assert "got TERM" in Path(req.stdout).read_text()


def test_preempt_lets_job_checkpoint_within_grace(jobs):
    ckpt = jobs.workdir / "ckpt"
    script = f"""#!/bin/bash
trap 'echo saved > {ckpt}; exit 0' TERM
echo started
sleep 30 &
wait
"""
    req, _ = jobs.launch(script, kill_wait_s=10)
    _wait_for(Path(req.stdout), "started")
    launcher.terminate(jobs.spool, req.job_id, req.run, "preempt")
    status = jobs.wait(req, timeout_s=10)
    assert status.final_state == "PREEMPTED" and status.exit_code_str == "0:0"
    assert ckpt.read_text() == "saved\n"
    assert status.end_time - status.start_time < 5  # well inside the 10 s grace


def test_send_signal_forwards_without_ending(jobs):
    script = "#!/bin/bash\ntrap 'echo got USR1; exit 7' USR1\necho started\nwhile :; do sleep 0.05; done\n"
    req, _ = jobs.launch(script)
    _wait_for(Path(req.stdout), "started")
    launcher.send_signal(jobs.spool, req.job_id, req.run, signal.SIGUSR1)
    status = jobs.wait(req, timeout_s=10)
    assert (status.final_state, status.exit_code_str, status.requested) == ("FAILED", "7:0", None)
    assert "got USR1" in Path(req.stdout).read_text()


def test_batch_only_signals_the_shell_and_leftovers_are_killed(jobs):
    pidfile = jobs.workdir / "child.pid"
    script = f"""#!/bin/bash
trap 'echo shell got TERM; exit 0' TERM
sleep 30 &
echo $! > {pidfile}
echo started
wait
"""
    req, _ = jobs.launch(script)
    _wait_for(Path(req.stdout), "started")
    child = int(pidfile.read_text())
    launcher.terminate(jobs.spool, req.job_id, req.run, "cancel", batch_only=True, grace_s=10)
    status = jobs.wait(req, timeout_s=10)
    assert status.final_state == "CANCELLED" and status.exit_code_str == "0:0"
    assert _gone(child)  # the background sleep got no TERM but is killed when the shell ends


def test_processes_escaping_the_process_group_are_killed_at_the_end(jobs):
    pidfile = jobs.workdir / "escaped.pid"
    script = f"#!/bin/bash\nsetsid sleep 30 < /dev/null > /dev/null 2>&1 &\necho $! > {pidfile}\nsleep 0.2\n"
    status, _ = jobs.run(script)
    assert status.final_state == "COMPLETED"
    escaped = int(pidfile.read_text())
    assert _gone(escaped)


def test_terminate_and_signal_after_exit_are_not_errors(jobs):
    req, _ = jobs.launch("#!/bin/bash\ntrue\n")
    status = jobs.wait(req)
    launcher.terminate(jobs.spool, req.job_id, req.run, "cancel")
    launcher.send_signal(jobs.spool, req.job_id, req.run, signal.SIGUSR1)
    launcher.terminate(jobs.spool, 999, 0, "cancel")  # never launched
    assert launcher.poll(jobs.spool, req.job_id, req.run) == status
    assert status.final_state == "COMPLETED"


def test_memory_limit_breach_is_out_of_memory(jobs):
    script = "#!/usr/bin/env python3\nimport time\nx = b'a' * (256 << 20)\nprint('allocated', flush=True)\ntime.sleep(30)\n"
    status, _ = jobs.run(script, mem_limit_mb=64)
    assert status.final_state == "OUT_OF_MEMORY" and status.requested == "oom"
    assert status.exit_code_str == "0:9"
    assert status.end_time - status.start_time < 10


def test_memory_limit_counts_the_whole_process_tree(jobs):
    script = ("#!/bin/bash\nfor i in 1 2 3; do python3 -c \"import time; x = b'a' * (40 << 20); "
              "time.sleep(30)\" & done\nwait\n")
    status, _ = jobs.run(script, mem_limit_mb=100)
    assert status.final_state == "OUT_OF_MEMORY"


def test_memory_under_limit_completes(jobs):
    status, _ = jobs.run("#!/usr/bin/env python3\nx = b'a' * (8 << 20)\n", mem_limit_mb=512)
    assert status.final_state == "COMPLETED"
    assert status.rusage["peak_tree_rss_kb"] > 0


def test_termination_reason_sets_state(jobs):
    for reason, want in (("timeout", "TIMEOUT"), ("node_fail", "NODE_FAIL")):
        req, _ = jobs.launch("#!/bin/bash\necho started\nsleep 30\n")
        _wait_for(Path(req.stdout), "started")
        launcher.terminate(jobs.spool, req.job_id, req.run, reason, grace_s=0)
        assert jobs.wait(req, timeout_s=10).final_state == want
    assert os.path.isdir(jobs.spool)


def test_time_limit_can_be_shortened_and_lifted_while_running(jobs):
    req, _ = jobs.launch("#!/bin/bash\nsleep 30\n")
    launcher.set_time_limit(jobs.spool, req.job_id, req.run, 1)
    status = jobs.wait(req, timeout_s=10)
    assert status.final_state == "TIMEOUT" and status.end_time - status.start_time < 5
    req, _ = jobs.launch("#!/bin/bash\nsleep 2.5\n", time_limit_s=2)
    launcher.set_time_limit(jobs.spool, req.job_id, req.run, None)
    assert jobs.wait(req, timeout_s=10).final_state == "COMPLETED"
    launcher.set_time_limit(jobs.spool, req.job_id, req.run, 1)  # after the end: no error


# A job that keeps writing after the signal: the notice must stay whole after its first lines.
KEEPS_WRITING = """#!/bin/bash
trap 'for i in 1 2 3 4 5; do echo "after TERM line $i with enough text to cover a notice"; sleep 0.1; done; exit 0' TERM
echo started
while :; do sleep 0.05; done
"""


def _whole(text: str, notice: str) -> None:
    """`notice` stands on a line of its own and every later line the job wrote is there too."""
    lines = text.splitlines()
    assert lines[0] == "started", text
    hits = [ln for ln in lines if notice in ln]
    assert len(hits) == 1 and hits[0].startswith("slurmstepd-") and hits[0].endswith("***"), text
    assert [ln for ln in lines if ln.startswith("after TERM")] == [
        f"after TERM line {i} with enough text to cover a notice" for i in range(1, 6)], text


def test_cancel_notice_is_not_overwritten_by_later_output(jobs):
    # issue 15: the job's file was opened without O_APPEND, so its next writes landed over the notice
    req, _ = jobs.launch(KEEPS_WRITING, kill_wait_s=10)
    _wait_for(Path(req.stdout), "started")
    launcher.terminate(jobs.spool, req.job_id, req.run, "cancel", grace_s=10)
    status = jobs.wait(req, timeout_s=15)
    assert status.final_state == "CANCELLED"
    _whole(Path(req.stdout).read_text(), f"*** JOB {req.job_id} ON ")


def test_time_limit_and_preemption_notices_stay_whole(jobs):
    req, _ = jobs.launch(KEEPS_WRITING, time_limit_s=1, kill_wait_s=10)
    assert jobs.wait(req, timeout_s=15).final_state == "TIMEOUT"
    _whole(Path(req.stdout).read_text(), "DUE TO TIME LIMIT ***")
    req, _ = jobs.launch(KEEPS_WRITING, kill_wait_s=10)
    _wait_for(Path(req.stdout), "started")
    launcher.terminate(jobs.spool, req.job_id, req.run, "preempt")
    assert jobs.wait(req, timeout_s=15).final_state == "PREEMPTED"
    _whole(Path(req.stdout).read_text(), "DUE TO PREEMPTION ***")


def test_memory_kill_leaves_slurms_line(jobs):
    script = "#!/bin/bash\necho started\npython3 -c 'b = bytearray(300 * 1024 * 1024); import time; time.sleep(30)'\n"
    req, _ = jobs.launch(script, mem_limit_mb=50)
    status = jobs.wait(req, timeout_s=30)
    assert status.final_state == "OUT_OF_MEMORY"
    text = Path(req.stdout).read_text()
    assert text.startswith("started\n") and f"error: StepId={req.job_id}.batch exceeded memory limit (" in text
    assert "), being killed" in text


def test_kernel_oom_kills_in_a_unit_leave_slurms_line(jobs, tmp_path, monkeypatch):
    """In a systemd unit the kernel kills at MemoryMax and the supervisor reads the unit's
    memory.events: the run is OUT_OF_MEMORY and the error file gets slurmstepd's line after
    the job's output (the cgroup is a crafted directory: this machine cannot OOM a unit)."""
    from batchd.node import supervisor as sup

    cg = tmp_path / "cg"
    cg.mkdir()
    (cg / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    req = jobs.request("#!/bin/bash\ntrue\n")
    Path(req.stdout).write_text("job output\n")
    s = sup.Supervisor(str(tmp_path / "run"), None, unit=True)
    (tmp_path / "run").mkdir()
    s.req, s.cgroup_dir, s.oom_base = req, str(cg), 0
    written = {}
    monkeypatch.setattr(s, "_write_record", lambda name, data: written.update(data))
    s._write_exit(9, _Rusage(), time.time())  # 9: killed by SIGKILL
    assert written["final_state"] == "OUT_OF_MEMORY"
    assert Path(req.stdout).read_text() == (
        "job output\n" f"slurmstepd-{req.node or os.uname().nodename.split('.')[0]}: error: Detected 2 oom_kill "
        f"events in StepId={req.job_id}.batch. Some of the step tasks have been OOM Killed.\n")


class _Rusage:
    ru_maxrss, ru_utime, ru_stime = 0, 0.0, 0.0
