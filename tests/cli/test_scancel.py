"""scancel requests, messages and exit codes (views/02_scancel.txt, 06_scancel_errors.txt)."""

import pytest

from batchd.cli import scancel


def run(argv, capsys):
    rc = scancel.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def invalid(daemon, *ids):
    daemon.replies["/v1/jobs/signal"] = {"done": [], "errors": [
        {"id": i, "message": "Invalid job id specified"} for i in ids]}


def test_cancel_ids_and_array_tasks(daemon, capsys):
    assert run(["84", "94_3", "94_[5-7]"], capsys) == (0, "", "")
    assert daemon.calls[-1][:3] == ("POST", "/v1/jobs/signal", {
        "ids": ["84", "94_3", "94_[5-7]"], "filters": {}, "signal": None, "batch_only": False})


def test_unknown_job_is_silent_unless_verbose(daemon, capsys):
    invalid(daemon, "999999")
    assert run(["999999"], capsys) == (0, "", "")
    assert run(["-v", "999999"], capsys) == (0, "", "scancel: Terminating job 999999\n"
                                             "scancel: error: Kill job error on job id 999999: "
                                             "Invalid job id specified\n")


def test_permission_error_is_printed_and_exits_1(daemon, capsys):
    daemon.replies["/v1/jobs/signal"] = {"done": [], "errors": [
        {"id": "84", "message": "Access/permission denied"}]}
    assert run(["84"], capsys) == (1, "", "scancel: error: Kill job error on job id 84: "
                                   "Access/permission denied\n")


@pytest.mark.parametrize("argv,err", [
    (["abc"], "scancel: error: Invalid job id abc\n"),
    ([], "scancel: error: No job identification provided\n"),
    (["-s", "NOPE", "5"], "scancel: error: Invalid job signal: NOPE\n"),
])
def test_bad_input(daemon, capsys, argv, err):
    assert run(argv, capsys) == (1, "", err)
    assert daemon.calls == []


def test_filters(daemon, capsys):
    run(["-n", "niced"], capsys)
    assert daemon.calls[-1][2] == {"ids": [], "filters": {"names": ["niced"]}, "signal": None,
                                   "batch_only": False}
    run(["-u", "root", "-t", "PENDING", "-A", "serving"], capsys)
    assert daemon.calls[-1][2]["filters"] == {"users": ["root"], "accounts": ["serving"], "states": ["PENDING"]}
    run(["--state=RUNNING", "-n", "serve-b"], capsys)
    assert daemon.calls[-1][2]["filters"] == {"names": ["serve-b"], "states": ["RUNNING"]}
    run(["--me", "-p", "gpu"], capsys)
    f = daemon.calls[-1][2]["filters"]
    assert f["partitions"] == ["gpu"] and len(f["users"]) == 1


def test_signal(daemon, capsys):
    assert run(["--signal=USR1", "--batch", "87"], capsys) == (0, "", "")
    assert daemon.calls[-1][2] == {"ids": ["87"], "filters": {}, "signal": 10, "batch_only": True}
    run(["-s", "9", "-v", "88"], capsys)
    assert daemon.calls[-1][2]["signal"] == 9
    assert scancel.parse_signal("sigterm") == 15 and scancel.parse_signal("HUP") == 1


def test_help(daemon, capsys):
    rc, out, _ = run(["-i", "--help"], capsys)
    assert rc == 0 and out.splitlines()[:3] == [
        "Usage: scancel [OPTIONS] [job_id[_array_id][.step_id]]",
        "  -A, --account=account           act only on jobs charging this account",
        "  -b, --batch                     signal batch shell for specified job"]


def test_nodelist_is_resolved_to_job_ids(daemon, capsys):
    daemon.jobs[9]["node_list"] = "gpu[01-02]"   # job 85
    assert run(["-w", "gpu02", "-u", "root"], capsys) == (0, "", "")
    get, post = daemon.calls[-2], daemon.calls[-1]
    assert get[:2] == ("GET", "/v1/jobs") and get[3] == {"users": "root"}
    assert post[2] == {"ids": ["85"], "filters": {"users": ["root"]}, "signal": None, "batch_only": False}
    daemon.calls.clear()
    assert run(["-w", "nowhere"], capsys) == (0, "", "")
    assert [c[1] for c in daemon.calls] == ["/v1/jobs"]   # nothing matched: nothing signalled


def test_verbose_names_jobs_chosen_by_filters(daemon, capsys):
    daemon.replies["/v1/jobs/signal"] = {"done": ["95", "96"], "errors": []}
    assert run(["-v", "-n", "niced"], capsys) == (0, "", "scancel: Terminating job 95\nscancel: Terminating job 96\n")
