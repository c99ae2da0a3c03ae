"""sbatch end to end against a fake daemon: output forms, precedence of the command
line over SBATCH_* over #SBATCH lines, directives only before the first command,
script sources, --export, -W and --test-only."""

from __future__ import annotations

import io

import pytest
from sbatch_helpers import FakeDaemon, recorded_caller_env

from batchd.cli import sbatch


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    sock = str(tmp_path / "d.sock")
    with FakeDaemon(sock, first_id=42) as d:
        yield d


def run(argv, daemon, monkeypatch, capsys, extra_env=None, stdin=None):
    env = recorded_caller_env({"BATCHD_SOCKET": daemon.path, **(extra_env or {})})
    monkeypatch.setattr(sbatch.os, "environ", env)
    monkeypatch.setenv("BATCHD_SOCKET", daemon.path)
    if stdin is not None:
        monkeypatch.setattr(sbatch.sys, "stdin", io.StringIO(stdin))
    try:
        rc = sbatch.main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_submitted_line_and_parsable(daemon, monkeypatch, capsys):
    assert run(["--wrap", "true"], daemon, monkeypatch, capsys) == (0, "Submitted batch job 42\n", "")
    assert run(["--parsable", "--wrap", "true"], daemon, monkeypatch, capsys) == (0, "43\n", "")
    assert run(["--parsable", "-M", "c1", "--wrap", "true"], daemon, monkeypatch, capsys) == (0, "44;c1\n", "")
    assert run(["-Q", "--wrap", "true"], daemon, monkeypatch, capsys) == (0, "", "")


def test_wrap_script_and_name(daemon, monkeypatch, capsys):
    run(["--wrap", "echo hi"], daemon, monkeypatch, capsys)
    spec = daemon.accepted[-1]
    assert spec["script"] == "#!/bin/sh\n# This script was created by sbatch --wrap.\n\necho hi\n"
    assert spec["name"] == "wrap" and spec["unnamed"] is False


def test_precedence_cli_over_env_over_script(daemon, tmp_path, monkeypatch, capsys):
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH -J from_script\n#SBATCH -p debug\n"
                                     "#SBATCH -t 5\n#SBATCH --account=serving\n\n# comment\n"
                                     "echo go\n#SBATCH --nice=7\n#SBATCH -A notebooks\n")
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(["-t", "7", "job.sh", "a1", "a2"], daemon, monkeypatch, capsys,
                       {"SBATCH_PARTITION": "gpu", "SBATCH_TIMELIMIT": "9"})
    assert rc == 0, err
    spec = daemon.accepted[-1]
    assert spec["name"] == "from_script"
    assert spec["partition"] == "gpu"            # env beats script
    assert spec["time_limit_s"] == 7 * 60        # command line beats env
    assert spec["account"] == "serving"          # directive after the first command is ignored
    assert spec["nice"] == 0
    assert spec["argv"] == ["a1", "a2"] and spec["script_path"] == "job.sh"


def test_script_name_default_and_stdin(daemon, tmp_path, monkeypatch, capsys):
    (tmp_path / "train.sh").write_text("#!/bin/sh\ntrue\n")
    monkeypatch.chdir(tmp_path)
    run(["train.sh"], daemon, monkeypatch, capsys)
    assert daemon.accepted[-1]["name"] == "train.sh"
    run([], daemon, monkeypatch, capsys, stdin="#!/bin/sh\n#SBATCH -c 3\ntrue\n")
    spec = daemon.accepted[-1]
    assert spec["name"] == "sbatch" and spec["unnamed"] is True and spec["cpus_per_task"] == 3


def test_directive_quoting_and_comments():
    script = "#!/bin/sh\n#SBATCH --comment='two words' -J x # trailing\n#SBATCH  -o \"a b.out\"\ntrue\n"
    assert sbatch.directives(script) == ["--comment=two words", "-J", "x", "-o", "a b.out"]


def test_chdir_relative_to_submit_dir(daemon, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run(["-D", "sub/dir", "--wrap", "true"], daemon, monkeypatch, capsys)
    spec = daemon.accepted[-1]
    assert spec["workdir"] == str(tmp_path / "sub" / "dir") and spec["submit_dir"] == str(tmp_path)


@pytest.mark.parametrize("export, want_in, want_out", [
    ("ALL", {"FOO": "1", "LANG": "C.UTF-8"}, {"SLURM_EXPORT_ENV"}),
    ("NONE", {"SLURM_EXPORT_ENV": "NONE", "SLURM_GET_USER_ENV": "1", "SLURM_X": "s"}, {"FOO", "LANG"}),
    ("NIL", {"SLURM_EXPORT_ENV": "NIL", "SLURM_X": "s"}, {"FOO", "LANG", "SLURM_GET_USER_ENV", "HOME"}),
    ("FOO,BAR=2", {"FOO": "1", "BAR": "2", "SLURM_GET_USER_ENV": "1", "SLURM_X": "s"}, {"LANG"}),
    ("ALL,FOO=9", {"FOO": "9", "LANG": "C.UTF-8", "SLURM_EXPORT_ENV": "ALL,FOO=9"}, set()),
], ids=["all", "none", "nil", "list", "all-plus"])
def test_export(export, want_in, want_out):
    env = sbatch.job_environment(export, {"FOO": "1", "LANG": "C.UTF-8", "SLURM_X": "s"})
    for k, v in want_in.items():
        assert env.get(k) == v, k
    for k in want_out:
        assert k not in env


def test_export_none_gets_login_environment():
    env = sbatch.job_environment("NONE", {})
    for k in ("HOME", "SHELL", "USER", "LOGNAME", "MAIL", "PATH"):
        assert env.get(k)


def test_export_file(tmp_path):
    f = tmp_path / "env"
    f.write_bytes(b"A=1\0B=x=y\0")
    env = sbatch.job_environment("ALL", {"A": "caller"}, str(f))
    assert env["A"] == "caller" and env["B"] == "x=y"


def test_wait_returns_job_exit_status(daemon, monkeypatch, capsys):
    daemon.states[42] = ("FAILED", "3:0")
    assert run(["-W", "--wrap", "exit 3"], daemon, monkeypatch, capsys) == (0 + 3, "Submitted batch job 42\n", "")
    daemon.states[42] = ("CANCELLED", "0:15")
    assert run(["--wait", "--wrap", "sleep 9"], daemon, monkeypatch, capsys)[0] == 1


def test_test_only_submits_nothing(daemon, monkeypatch, capsys):
    rc, out, err = run(["--test-only", "--wrap", "true"], daemon, monkeypatch, capsys)
    assert rc == 0 and out == "" and daemon.accepted == []
    assert err.startswith("sbatch: Job ") and " to start at " in err and "in partition gpu" in err


def test_spec_fields(daemon, monkeypatch, capsys):
    rc, _, err = run(["-N", "1", "-n", "4", "--ntasks-per-node=4", "-c", "2", "--mem-per-cpu=1G",
                      "--gpus-per-node=h200:2", "--signal=B:USR1@50", "--no-requeue", "--hold",
                      "--nice", "--exclusive", "--begin=now+1hour", "--array=0-15:4%2",
                      "--dependency=afterok:1", "--open-mode=append", "--comment=c", "--mail-type=END",
                      "-q", "high", "--constraint=nvlink", "--wrap", "x"], daemon, monkeypatch, capsys)
    assert rc == 0, err
    s = daemon.accepted[-1]
    assert (s["nodes_min"], s["ntasks"], s["ntasks_per_node"], s["cpus_per_task"]) == (1, 4, 4, 2)
    assert s["mem_per_cpu_mb"] == 1024 and s["mem_mb"] is None
    assert s["gpus_per_node"] == {"type": "h200", "count": 2}
    assert s["signal"] == {"signal": 10, "time_s": 50, "batch_only": True}
    assert (s["requeue"], s["hold"], s["nice"], s["exclusive"]) == (False, True, 100, True)
    assert s["begin_time"] > 0 and s["array"] == "0-15:4%2" and s["dependency"] == "afterok:1"
    assert (s["open_mode"], s["comment"], s["mail_type"], s["qos"], s["constraint"]) == \
        ("append", "c", "END", "high", "nvlink")


def test_help_and_usage(monkeypatch, capsys, daemon):
    rc, out, _ = run(["--help"], daemon, monkeypatch, capsys)
    assert rc == 0 and out.startswith("Usage: sbatch") and "--gpus-per-task" in out
    rc, out, _ = run(["--usage"], daemon, monkeypatch, capsys)
    assert rc == 0 and out.startswith("Usage: sbatch")


def test_export_quoted_values():
    assert sbatch.split_quoted("A='x,y',B,\"C=1,2\"") == ["A=x,y", "B", "C=1,2"]
    env = sbatch.job_environment("A='x,y',B", {"B": "b"})
    assert env["A"] == "x,y" and env["B"] == "b"


@pytest.mark.parametrize("read_first", [True, False], ids=["closed", "reset"])
def test_daemon_dropping_the_connection_is_one_line(read_first, tmp_path, monkeypatch, capsys):
    import socket
    import threading

    path = str(tmp_path / "rst.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)

    def drop():
        conn, _ = srv.accept()
        if read_first:
            conn.recv(65536)
        else:
            import time
            time.sleep(0.2)  # let the request arrive unread: closing then resets the peer
        conn.close()  # no reply at all

    t = threading.Thread(target=drop, daemon=True)
    t.start()
    monkeypatch.setattr(sbatch.os, "environ", recorded_caller_env({"BATCHD_SOCKET": path}))
    monkeypatch.setenv("BATCHD_SOCKET", path)
    from batchd.cli import client

    # a dropped reply is retried (the daemon may have stored the job): a short window here
    monkeypatch.setattr(client, "SUBMIT_RETRY_S", 2.0)
    with pytest.raises(SystemExit) as e:
        sbatch.main(["--wrap", "true"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and err.startswith("sbatch: error: ") and err.count("\n") == 1
    srv.close()


def test_ignored_options_warn_once_each(daemon, monkeypatch, capsys):
    # issue 15: Slurm accepts --mail-type/--mail-user/--container silently; batchd ignores them,
    # so it says so (the job is still submitted, exit 0)
    rc, out, err = run(["--mail-type=END", "--mail-user=a@b", "--container=/x", "--wrap", "true"],
                       daemon, monkeypatch, capsys, extra_env={"BATCHD_HINTS": "1"})
    assert (rc, out) == (0, "Submitted batch job 42\n")
    assert err.splitlines() == ["sbatch: warning: --mail-type is ignored: batchd sends no mail",
                                "sbatch: warning: --mail-user is ignored: batchd sends no mail",
                                "sbatch: warning: --container is ignored: batchd runs no OCI containers"]
    # in a pipe (a script, the recorded case 36_comment_constraint) stderr stays Slurm's: empty
    rc, out, err = run(["--mail-type=END", "--wrap", "true"], daemon, monkeypatch, capsys,
                       extra_env={"BATCHD_HINTS": "0"})
    assert (rc, err) == (0, "")
    # SBATCH_CONTAINER (Slurm accepts it as --container) warns the same way
    rc, out, err = run(["--wrap", "true"], daemon, monkeypatch, capsys, extra_env={"SBATCH_CONTAINER": "/x", "BATCHD_HINTS": "1"})
    assert (rc, err) == (0, "sbatch: warning: --container is ignored: batchd runs no OCI containers\n")
    # -L reaches the daemon, which refuses it as Slurm refuses an unknown license
    rc, _out, err = run(["-L", "foo:1", "--wrap", "true"], daemon, monkeypatch, capsys)
    assert (rc, err) == (1, "sbatch: error: Batch job submission failed: Invalid license specification\n")
    rc, _out, err = run(["--reservation=foo", "--wrap", "true"], daemon, monkeypatch, capsys)
    assert (rc, err) == (1, "sbatch: error: Batch job submission failed: Requested reservation is invalid\n")


NODE_CONFIG = "sbatch: error: Batch job submission failed: Requested node configuration is not available"


@pytest.mark.parametrize("args, why", [
    # Slurm 22.05's first line (recorded from the peer for the GPU cases), then batchd's reason
    (["--gres=gpu:nonexistent:1"], "sbatch: error: no node of partition gpu offers gres/gpu:nonexistent; "
                                   "GPU types there: h200"),
    (["--gres=gpu:8"], "sbatch: error: 8 GPUs asked on one node; the most on one node of partition gpu is "
                       "4 (vm), 4 in the partition"),
    # -c 65 answered "Memory specification can not be satisfied" (its default memory per CPU)
    (["-c", "65"], "sbatch: error: 65 CPUs asked on one node; the most on one node of partition gpu is 16 (vm)"),
])
def test_requests_no_node_holds_say_why(daemon, monkeypatch, capsys, args, why):
    # the explanation is for a person (a terminal, or BATCHD_HINTS=1) ...
    rc, out, err = run([*args, "--wrap", "true"], daemon, monkeypatch, capsys, extra_env={"BATCHD_HINTS": "1"})
    assert (rc, out) == (1, "")
    assert err.splitlines() == [NODE_CONFIG, why]
    # ... a script reading a pipe gets Slurm's line alone, as the recorded cases have it
    rc, out, err = run([*args, "--wrap", "true"], daemon, monkeypatch, capsys, extra_env={"BATCHD_HINTS": "0"})
    assert (rc, err) == (1, NODE_CONFIG + "\n")
