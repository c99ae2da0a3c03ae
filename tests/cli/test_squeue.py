"""squeue layouts against the real Slurm text of views/01_busy_cluster.txt."""

import json

import pytest

from batchd.cli import squeue
from tests.cli.conftest import NOW, golden


def run(argv, capsys):
    rc = squeue.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _query(daemon):
    """The last query squeue sent, but for `keys` (test_the_keys_squeue_asks_for_... checks
    what it names), which every table layout sends."""
    q = dict(daemon.calls[-1][3])
    assert "keys" in q
    del q["keys"]
    return q


def render(daemon, argv):
    opts, _ = squeue.parse("squeue", argv, squeue.TABLE)
    return squeue.render(daemon.jobs, opts, now=NOW)


@pytest.mark.parametrize("argv,name", [
    ([], "squeue_default.txt"),
    (["-l"], "squeue_long.txt"),
    (["-r"], "squeue_array_expanded.txt"),
    (["-o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"], "squeue_default.txt"),
    (["-o", "%i|%j|%u|%a|%q|%T|%r|%b|%C|%m|%l|%L|%Q|%p|%S|%V|%N|%D"], "squeue_o_pipe.txt"),
    (["--format=%A %i %F %K %T"], "squeue_array_codes.txt"),
    (["-O", "JobID,Name,UserName,Account,State,Reason,tres-per-node,tres-per-job,tres-alloc,NumCPUs,"
            "MinMemory,TimeLimit,PriorityLong"], "squeue_O_tres.txt"),
    (["-O", "JobID:10,Name:12,State:10,Reason:20,GroupName,Partition,QOS,SubmitTime,StartTime,EndTime"],
     "squeue_O_widths.txt"),
    (["--start"], "squeue_start.txt"),
    (["-h", "-o", "%i"], "squeue_ids.txt"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_layouts_match_slurm(daemon, argv, name):
    assert render(daemon, argv) == golden(name)


def test_pending_filter_through_main(daemon, capsys):
    rc, out, err = run(["-t", "PD"], capsys)
    assert rc == 0 and err == ""
    assert out == golden("squeue_pending.txt")
    q = daemon.calls[-1][3]
    assert q["states"] == "PENDING" and "all" not in q


def test_query_built_from_options(daemon, capsys):
    rc, _, _ = run(["-u", "root,daemon", "-A", "training", "-p", "gpu", "-n", "x", "-q", "low"], capsys)
    assert rc == 0
    q = _query(daemon)
    assert q == {"users": "root,daemon", "accounts": "training", "partitions": "gpu", "names": "x", "qos": "low",
                 "fold": "1"}


def test_the_daemon_folds_array_tasks_or_sends_runs_with_r_and_narrows_by_node(daemon, capsys):
    run([], capsys)
    assert _query(daemon) == {"fold": "1"}
    run(["-r"], capsys)
    assert _query(daemon) == {"fold": "runs"}
    run(["-r", "-w", "vm"], capsys)
    assert _query(daemon) == {"nodes": "vm", "fold": "runs"}


def test_unknown_users_are_dropped_with_slurms_error(daemon, capsys):
    # Slurm 22.05 (peer): `squeue -u nosuchuser` -> stderr "squeue: error: Invalid user:
    # nosuchuser" and a blank line, the header, exit 0; `-u root,nosuchuser` lists root's jobs
    rc, out, err = run(["-u", "root,nosuchuser_x"], capsys)
    assert rc == 0 and err == "squeue: error: Invalid user: nosuchuser_x\n\n"
    assert daemon.calls[-1][3]["users"] == "root"
    n = len(daemon.calls)
    rc, out, err = run(["-u", "nosuchuser_x", "-u", "4000000001"], capsys)
    assert rc == 0 and err == ("squeue: error: Invalid user: nosuchuser_x\n\n"
                               "squeue: error: Invalid user: 4000000001\n\n")
    assert out.splitlines() == [golden("squeue_default.txt").splitlines()[0]] and len(daemon.calls) == n


def test_noconvert_prints_memory_as_stored(daemon, capsys):
    # Slurm 22.05 (peer): --mem=2G shows %m "2G", with --noconvert "2048M"
    from batchd.cli import squeue_fields
    job = dict(daemon.jobs[0], mem_mb=2048, mem_per_cpu_mb=None, mem_per_node_mb=2048)
    assert squeue_fields.job_value(job, "min_memory") == "2G"
    try:
        rc, out, _ = run(["--noconvert", "-h", "-o", "%m", "-j", str(job["id"])], capsys)
        assert rc == 0
        assert squeue_fields.job_value(job, "min_memory") == "2048M"
    finally:
        squeue_fields.NOCONVERT = False


@pytest.mark.parametrize("mem_mb, shown, noconvert", [
    # Slurm 22.05 (peer, tests/compat/recorded/errors_slurm2205.json and by hand): `squeue -o %m`
    # converts while the size is a multiple of 512 MiB; --noconvert prints MiB as stored
    (1536, "1.50G", "1536M"), (2560, "2.50G", "2560M"), (1024, "1G", "1024M"),
    (1025, "1025M", "1025M"), (10000, "10000M", "10000M"), (1000, "1000M", "1000M"),
])
def test_min_memory_conversion_as_slurm(mem_mb, shown, noconvert):
    from batchd.cli import squeue_fields
    job = {"mem_mb": mem_mb, "mem_per_cpu_mb": None, "mem_per_node_mb": mem_mb}
    assert squeue_fields.job_value(job, "min_memory") == shown
    try:
        squeue_fields.NOCONVERT = True
        assert squeue_fields.job_value(job, "min_memory") == noconvert
    finally:
        squeue_fields.NOCONVERT = False


def test_t_all_and_job_list_ask_for_finished_jobs(daemon, capsys):
    run(["-t", "all"], capsys)
    assert _query(daemon) == {"all": "1", "fold": "1"}
    run(["-j", "84,85"], capsys)
    assert _query(daemon) == {"ids": "84,85", "all": "1", "fold": "1"}
    run(["-t", "CD,F"], capsys)
    assert _query(daemon) == {"states": "COMPLETED,FAILED", "all": "1", "fold": "1"}


def test_default_hides_finished_jobs(daemon, capsys):
    daemon.jobs[0]["state"] = "COMPLETED"
    _, out, _ = run(["-h", "-o", "%i"], capsys)
    assert "90" not in out.split()
    _, out, _ = run(["-h", "-t", "all", "-o", "%i %T"], capsys)
    assert "90 COMPLETED" in out.splitlines()


def test_unknown_single_job(daemon, capsys):
    daemon.jobs = []
    rc, out, err = run(["-j", "999999"], capsys)
    assert (rc, out, err) == (1, "", "slurm_load_jobs error: Invalid job id specified\n")


def test_unknown_jobs_in_a_list_are_not_an_error(daemon, capsys):
    daemon.jobs = []
    rc, out, err = run(["-j", "999998,999999", "-o", "%i"], capsys)
    assert (rc, out, err) == (0, "JOBID\n", "")


def test_daemon_down_is_one_line(monkeypatch, capsys):
    from batchd.cli import client

    def down(*a, **k):
        raise client.Unreachable("cannot reach the batchd daemon at /x.sock: No such file or directory")
    monkeypatch.setattr(client, "request", down)
    rc, out, err = run([], capsys)
    assert rc == 1 and out == ""
    assert err == "squeue: error: cannot reach the batchd daemon at /x.sock: No such file or directory\n"


def test_sort_option(daemon):
    out = render(daemon, ["-h", "-o", "%i", "-S", "i"]).split()
    assert out == ["84", "85", "86", "87", "88", "89", "90", "91", "92", "93", "94_[0-9%2]", "95", "96"]
    out = render(daemon, ["-h", "-o", "%i", "-S", "-Q,i"]).split()
    assert out[:3] == ["90", "85", "86"] and out[-1] == "91"


def test_array_tasks_and_expansion(daemon):
    daemon.jobs = [j for j in daemon.jobs if j["id"] == 94]
    daemon.jobs[0]["array_task_str"] = "[1,3,8-9]"
    daemon.jobs[0]["display_id"] = "94_[1,3,8-9]"
    assert render(daemon, ["-h", "-o", "%i %K"]) == "94_[1,3,8-9] 1,3,8-9\n"
    assert render(daemon, ["-h", "-r", "-o", "%i %K %F"]) == "94_1 1 94\n94_3 3 94\n94_8 8 94\n94_9 9 94\n"


def test_width_and_justification(daemon):
    daemon.jobs = daemon.jobs[:1]
    assert render(daemon, ["-o", "[%5j][%.5j][%j][%%]"]) == "[NAME ][ NAME][NAME][%]\n[nb-ov][nb-ov][nb-over][%]\n"


def test_json(daemon):
    doc = json.loads(render(daemon, ["--json"]))
    assert doc["errors"] == []
    j = {x["job_id"]: x for x in doc["jobs"]}
    assert j[85]["job_state"] == "RUNNING" and j[85]["time_limit"] == 60 and j[85]["nodes"] == "vm"
    assert j[94]["array_task_string"] == "0-9%2" and j[90]["state_reason"] == "AssocGrpGRES"


def test_bad_options(daemon, capsys):
    rc, _, err = run(["--bogus"], capsys)
    assert rc == 1 and "unrecognized option '--bogus'" in err
    rc, _, err = run(["-O", "NoSuchField"], capsys)
    assert rc == 1 and "Invalid job format specification: NoSuchField" in err
    rc, _, err = run(["-t", "nonsense"], capsys)
    # Slurm 22.05 (peer): the valid states follow on a line of their own, then a blank line
    assert rc == 1 and err == ("squeue: error: Invalid job state specified: nonsense\n"
                               f"squeue: error: Valid job states include: {squeue.VALID_STATES}\n\n")
    assert squeue.VALID_STATES.startswith("PENDING,RUNNING,SUSPENDED,") and squeue.VALID_STATES.endswith(",STOPPED")
    rc, _, err = run(["-j", "12,abc"], capsys)
    assert rc == 1 and err == "squeue: error: Invalid job id: abc\n"
    assert daemon.calls == []


def _split_array(daemon, tasks, throttle=None):
    """The daemon may list an array's pending tasks one by one (the last task keeps the
    master id, as Slurm numbers them)."""
    base = next(j for j in daemon.jobs if j["id"] == 94)
    daemon.jobs = []
    for k, t in enumerate(tasks):
        jid = 94 if t == tasks[-1] else 94 + k + 1
        daemon.jobs.append(dict(base, id=jid, array_task_id=t, array_task_str=None, display_id=f"94_{t}",
                                array_max_running=throttle))


def test_pending_tasks_fold_into_one_row(daemon):
    _split_array(daemon, [0, 1, 2, 4, 8, 9], throttle=2)
    assert render(daemon, ["-h", "-o", "%i %A %K"]) == "94_[0-2,4,8-9%2] 94 0-2,4,8-9%2\n"
    assert render(daemon, ["-h", "-r", "-o", "%i"]).split() == ["94_0", "94_1", "94_2", "94_4", "94_8", "94_9"]
    daemon.jobs[2]["state"] = "RUNNING"
    assert render(daemon, ["-h", "-o", "%i %t"]).splitlines() == ["94_[0-1,4,8-9%2] PD", "94_2 R"]
    _split_array(daemon, [5])
    assert render(daemon, ["-h", "-o", "%i"]) == "94_[5]\n"


@pytest.mark.parametrize("state,exit_code,reason,shown", [
    ("FAILED", "1:0", None, "NonZeroExitCode"), ("FAILED", "0:9", "None", "None"),
    ("FAILED", "0:53", "JobLaunchFailure", "JobLaunchFailure"), ("TIMEOUT", "0:0", None, "TimeLimit"),
    ("COMPLETED", "0:0", None, "None"), ("PENDING", "0:0", "Priority", "Priority"),
])
def test_terminal_reasons(daemon, state, exit_code, reason, shown):
    daemon.jobs = [dict(daemon.jobs[0], state=state, exit_code=exit_code, reason=reason)]
    assert render(daemon, ["-h", "-t", "all", "-o", "%r"]) == shown + "\n"


def test_positional_argument_is_refused(daemon, capsys):
    rc, out, err = run(["-o", "%i", "extra"], capsys)
    assert (rc, out) == (1, "") and err.splitlines() == [
        "squeue: error: Unrecognized option: extra", 'Try "squeue --help" for more information']
    assert daemon.calls == []


def test_environment_formats(daemon, monkeypatch):
    monkeypatch.setenv("SQUEUE_FORMAT", "%i:%t")
    monkeypatch.setenv("SQUEUE_SORT", "i")
    assert render(daemon, ["-h"]).split()[:2] == ["84:R", "85:R"]
    assert render(daemon, ["-h", "-o", "%j", "-S", "-Q"]).split()[0] == "nb-over"
    monkeypatch.setenv("SQUEUE_FORMAT2", "JobID:4,State:3")
    monkeypatch.delenv("SQUEUE_FORMAT")
    assert render(daemon, ["-h"]).splitlines()[0] == "84  RUN"


def test_begin_time_is_the_pending_start(daemon):
    later = next(j for j in daemon.jobs if j["id"] == 92)
    later["begin_time"], later["start_time"] = later["start_time"], None
    assert render(daemon, ["-h", "--start"]).splitlines()[0].split()[:6] == \
        ["92", "gpu", "later", "root", "PD", "2026-11-30T15:43:44"]
    daemon.jobs = [later]
    assert render(daemon, ["-h", "-o", "%i %S %e"]) == "92 2026-11-30T15:43:44 NONE\n"


def test_more_codes_and_fields(daemon):
    daemon.jobs = [j for j in daemon.jobs if j["id"] in (84, 90)]
    assert render(daemon, ["-o", "%i %H %I %J %B %y", "-S", "i"]).splitlines() == [
        "JOBID SOCKETS_PER_NODE CORES_PER_SOCKET THREADS_PER_CORE EXEC_HOST NICE",
        "84 * * * vm 0", "90 * * * n/a 0"]
    assert render(daemon, ["-O", "JobID:4,CPUsPerTask:.3,PendingTime:5,BatchFlag:2", "-S", "i"]).splitlines() == [
        "JOBICPUPENDIBA", "84    40    1 ", "90    14    1 "]


def test_runs_print_as_the_views_of_every_task_in_every_layout(daemon):
    """`fold=runs`: the tasks expanded from a run (fmt.TaskView, whose cells are formatted
    once per run) print exactly as plain copies of the run's view with each task's ids, in
    every % code and every -O field, sorted or not."""
    from batchd.cli import fmt
    from batchd.cli.squeue_fields import CODES, FIELDS

    base = next(j for j in daemon.jobs if j.get("array_job_id") is not None and j["state"] == "PENDING")
    runs = [{"view": dict(base, reason="Priority"), "tasks": [[9001, 3, 4], [9010, 9, 1]]},
            {"view": dict(base, reason="JobHeldUser", priority=0, hold=True), "tasks": [[9011, 12, 2]]}]
    others = [j for j in daemon.jobs if j["id"] < 9001]
    expanded = fmt.expand_task_runs(others, runs)
    plain = [dict(j) for j in expanded]
    assert any(isinstance(j, fmt.TaskView) for j in expanded) and plain == expanded
    percent = " ".join(f"%{c}" for c in CODES)
    fields = ",".join(FIELDS)
    for argv in (["-r", "-o", percent], ["-r", "-O", fields], ["-r", "-S", "-t,i", "-o", percent], ["-r"]):
        opts, _ = squeue.parse("squeue", argv, squeue.TABLE)
        assert squeue.render(expanded, opts, now=NOW) == squeue.render(plain, opts, now=NOW), argv


class _Reads(dict):
    """A view that records which keys are read."""

    def __init__(self, view, seen):
        super().__init__(view)
        self.seen = seen

    def get(self, k, default=None):
        self.seen.add(k)
        return super().get(k, default)

    def __getitem__(self, k):
        self.seen.add(k)
        return super().__getitem__(k)


def test_view_keys_name_every_key_a_column_or_a_sort_reads(daemon):
    from batchd.cli.squeue_fields import CODES, FIELDS, job_value, view_keys

    for value in {v[1] for v in CODES.values()} | {v[1] for v in FIELDS.values()}:
        seen: set = set()
        for j in daemon.jobs:
            job_value(_Reads(j, seen), value, NOW)
        assert seen <= view_keys([value]), (value, seen - view_keys([value]))
    for code in CODES:
        seen = set()
        for j in daemon.jobs:
            squeue._sort_value(_Reads(j, seen), code)
        allowed = set(squeue._SORT_KEYS.get(code, ())) | view_keys([CODES[code][1]])
        assert seen <= allowed, (code, seen - allowed)


@pytest.mark.parametrize("argv", [
    [], ["-l"], ["-r"], ["--start"], ["-t", "all"], ["-S", "-M,u"], ["-S", "V,e,D,C,y,U,L"],
    ["-o", "%A %i %F %K %T %r %R %S %e %L %l %M %m %c %C %D %b %o %Z %y %q %p %Q %V"],
    ["-O", "JobID,Name,UserName,Account,State,Reason,tres-per-node,tres-per-job,tres-alloc,NumCPUs,"
           "MinMemory,TimeLimit,PriorityLong,EndTime,PendingTime,cpus-per-task,MinCpus,StdIn,StdOut,WorkDir"],
], ids=lambda a: " ".join(a) or "default")
def test_the_keys_squeue_asks_for_print_what_whole_views_print(daemon, argv):
    """squeue sends `keys=` (the JOB_VIEW keys its layout, sort and folding read); the
    output from views trimmed to them is the output from whole views."""
    opts, _ = squeue.parse("squeue", argv, squeue.TABLE)
    keys = squeue.view_keys_needed(opts)
    trimmed = [{k: v for k, v in j.items() if k in keys} for j in daemon.jobs]
    assert squeue.render(trimmed, opts, now=NOW) == squeue.render(daemon.jobs, opts, now=NOW)
    assert squeue.view_keys_needed({**opts, "json": True}) is None


def test_steps_ask_for_whole_views(daemon, capsys):
    """squeue -s prints its own layout from more keys than a table's: no `keys=` (an e2e
    test found the batch step's node list lost to a trimmed view)."""
    run(["-s"], capsys)
    jobs_calls = [c for c in daemon.calls if c[1] == "/v1/jobs"]
    assert jobs_calls and "keys" not in jobs_calls[-1][3]


def test_computed_names_every_key_job_value_computes():
    """job_value sends a key not in COMPUTED straight to the view's value: a branch added
    for a key left out of COMPUTED would never run."""
    import ast
    import inspect

    from batchd.cli import squeue_fields

    compared = set()
    for n in ast.walk(ast.parse(inspect.getsource(squeue_fields.job_value))):
        if isinstance(n, ast.Compare) and isinstance(n.left, ast.Name) and n.left.id == "key":
            for c in n.comparators:
                if isinstance(c, ast.Tuple):
                    compared.update(e.value for e in c.elts)
                elif isinstance(c, ast.Constant):
                    compared.add(c.value)
    assert compared == squeue_fields.COMPUTED
