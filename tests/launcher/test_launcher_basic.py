"""Exit states, environment, output files and launch failures of real jobs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from batchd.node import launcher


@pytest.mark.parametrize(
    ("body", "want_state", "want_code"),
    [
        ("true", "COMPLETED", "0:0"),
        ("false", "FAILED", "1:0"),
        ("exit 3", "FAILED", "3:0"),
        ("sleep 0.2", "COMPLETED", "0:0"),
        ("kill -KILL $$", "FAILED", "0:9"),
        ("kill -TERM $$", "FAILED", "0:15"),
    ],
    ids=["true", "false", "exit3", "sleep", "self-sigkill", "self-sigterm"],
)
def test_exit_status_maps_to_slurm_state(jobs, body, want_state, want_code):
    status, _ = jobs.run(f"#!/bin/bash\n{body}\n")
    assert status.state == "EXITED"
    assert (status.final_state, status.exit_code_str) == (want_state, want_code)
    assert status.requested is None
    assert status.start_time <= status.end_time
    assert set(status.rusage) >= {"max_rss_kb", "user_cpu_s", "sys_cpu_s"}


def test_elapsed_time_is_wall_clock_of_the_job(jobs):
    status, _ = jobs.run("#!/bin/bash\nsleep 0.5\n")
    assert 0.45 <= status.end_time - status.start_time < 5


def test_launch_returns_running_job_in_its_own_session(jobs):
    req, info = jobs.launch("#!/bin/bash\nsleep 2\n")
    running = launcher.poll(jobs.spool, req.job_id, 0)
    assert running.state == "RUNNING" and running.pid == info.pid
    assert os.getpgid(info.pid) == info.pid
    assert os.getsid(info.pid) == info.pid != os.getsid(0)
    supervisor = psutil.Process(info.pid).parent()
    assert supervisor.pid != os.getpid() and supervisor.ppid() != os.getpid()
    assert os.getpgid(supervisor.pid) != os.getpgid(0)
    assert jobs.wait(req).final_state == "COMPLETED"


def test_environment_argv_and_workdir(jobs, monkeypatch):
    monkeypatch.setenv("DAEMON_SECRET", "leak")
    script = '#!/bin/bash\necho "args=$*"\necho "pwd=$(pwd)"\nenv | sort\n'
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "0,2",
           "NOTIFY_SOCKET": "/run/systemd/notify", "INVOCATION_ID": "abc", "WITH SPACE": "a b"}
    status, out = jobs.run(script, job_id=7, env=env, argv=["one", "two words"])
    assert status.final_state == "COMPLETED"
    lines = out.splitlines()
    assert "args=one two words" in lines
    assert f"pwd={jobs.workdir}" in lines
    assert "SLURM_JOB_ID=7" in lines and "CUDA_VISIBLE_DEVICES=0,2" in lines
    assert not any(line.startswith(("NOTIFY_SOCKET=", "INVOCATION_ID=", "DAEMON_SECRET=")) for line in lines)


def test_script_without_shebang_runs_under_bash(jobs):
    status, out = jobs.run('echo "bash=${BASH_VERSION:+yes}"\n')
    assert status.final_state == "COMPLETED" and "bash=yes" in out


def test_shebang_interpreter_is_used(jobs):
    status, out = jobs.run("#!/usr/bin/env python3\nimport sys\nprint('py', sys.argv[1:])\n", argv=["x"])
    assert status.final_state == "COMPLETED" and "py ['x']" in out


def test_separate_stdout_and_stderr_files(jobs):
    out, err = jobs.workdir / "o.txt", jobs.workdir / "e.txt"
    status, _ = jobs.run("#!/bin/bash\necho to-out\necho to-err >&2\n", stdout=str(out), stderr=str(err))
    assert status.final_state == "COMPLETED"
    assert out.read_text() == "to-out\n" and err.read_text() == "to-err\n"


def test_same_file_for_both_streams_keeps_order(jobs):
    status, out = jobs.run("#!/bin/bash\necho a\necho b >&2\necho c\n")
    assert out == "a\nb\nc\n"


@pytest.mark.parametrize(("mode", "want"), [("truncate", "new\n"), ("append", "old\nnew\n")])
def test_open_mode(jobs, mode, want):
    out = jobs.workdir / "mode.txt"
    out.write_text("old\n")
    jobs.run("#!/bin/bash\necho new\n", stdout=str(out), stderr=str(out), open_mode=mode)
    assert out.read_text() == want


def test_stdin_file_and_default_dev_null(jobs):
    src = jobs.workdir / "in.txt"
    src.write_text("from-stdin\n")
    _, out = jobs.run("#!/bin/bash\ncat\n", stdin=str(src))
    assert out == "from-stdin\n"
    _, out = jobs.run("#!/bin/bash\ncat; echo eof\n")
    assert out == "eof\n"


def test_missing_workdir_fails_with_message_in_stderr(jobs):
    missing = jobs.workdir / "does-not-exist"
    status, out = jobs.run("#!/bin/bash\necho ran\n", workdir=str(missing))
    assert status.final_state == "FAILED" and status.exit_code_str == "1:0"
    assert "ran" not in out
    assert f"couldn't chdir to `{missing}'" in out and "No such file or directory" in out
    assert "chdir" in status.error


def test_unwritable_output_dir_fails_without_running(jobs):
    flag = jobs.workdir / "ran"
    status, _ = jobs.run(f"#!/bin/bash\ntouch {flag}\n", stdout=str(jobs.workdir / "nodir" / "o.txt"))
    assert status.final_state == "FAILED"
    assert "couldn't open output file" in status.error
    assert not flag.exists()


def test_missing_interpreter_fails(jobs):
    status, out = jobs.run("#!/nonexistent/interpreter\necho hi\n")
    assert status.final_state == "FAILED" and "execve()" in status.error
    assert "No such file or directory" in out


def test_job_directory_layout_and_modes(jobs):
    req, info = jobs.launch("#!/bin/bash\ntrue\n")
    jobs.wait(req)
    assert info.jobdir == launcher.jobdir_path(jobs.spool, req.job_id, 0)
    names = set(os.listdir(info.jobdir))
    assert {"request.json", "slurm_script", "started.json", "exit.json", "supervisor.log"} <= names
    assert os.stat(info.jobdir).st_mode & 0o022 == 0  # nobody but the daemon writes here
    assert os.stat(Path(info.jobdir) / "slurm_script").st_mode & 0o777 == 0o700
    assert os.stat(Path(info.jobdir) / "request.json").st_mode & 0o777 == 0o600


def test_job_gets_default_signal_dispositions(jobs):
    # The supervisor ignores SIGPIPE/SIGINT/SIGTERM for itself; the job must not inherit that.
    status, out = jobs.run("#!/bin/bash\nyes | head -n 1\ntrap -p\ngrep -E '^Sig(Ign|Blk)' /proc/self/status\n")
    assert status.final_state == "COMPLETED"
    assert "Broken pipe" not in out
    lines = out.splitlines()
    assert lines[0] == "y"
    assert "SigBlk:\t0000000000000000" in lines
    ignored = int(next(line for line in lines if line.startswith("SigIgn:")).split()[1], 16)
    for sig in (signal.SIGPIPE, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
        assert not ignored & (1 << (sig - 1)), sig


@pytest.mark.parametrize(("env_umask", "want"), [(None, "0022"), ("0077", "0077")])
def test_umask_from_slurm_umask(jobs, env_umask, want):
    env = {"PATH": "/usr/bin:/bin"} | ({"SLURM_UMASK": env_umask} if env_umask else {})
    _, out = jobs.run("#!/bin/bash\numask\n", env=env)
    assert out == f"{want}\n"
