"""sinfo and scontrol show layouts against views/01_busy_cluster.txt and
views/07_preempt_no_requeue.txt. The recordings dropped the first (unindented) line of
some scontrol records; those lines are compared with the shape other recordings show."""

import pytest

from batchd.cli import scontrol, sinfo
from tests.cli.conftest import NOW, golden, job, ts


def sinfo_render(daemon, argv):
    opts, _ = sinfo.parse("sinfo", argv, sinfo.TABLE)
    return sinfo.render(daemon.nodes, daemon.partitions, opts, now=NOW)


@pytest.mark.parametrize("argv,name", [
    ([], "sinfo_default.txt"),
    (["-o", "%N %G %T"], "sinfo_o.txt"),
    (["-N", "-l"], "sinfo_N_l.txt"),
    (["-O", "NodeList,Gres:30,GresUsed:40,CPUsState,Memory,AllocMem,StateLong"], "sinfo_O.txt"),
    (["-s"], "sinfo_s.txt"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_sinfo_matches_slurm(daemon, argv, name):
    assert sinfo_render(daemon, argv) == golden(name)


def test_sinfo_groups_by_state_and_compresses_hosts(daemon):
    base = dict(daemon.nodes[0])
    daemon.nodes = []
    for i, st in enumerate(["IDLE", "IDLE", "MIXED", "IDLE", "DOWN+NOT_RESPONDING", "IDLE+DRAIN"], 1):
        daemon.nodes.append(dict(base, name=f"gpu{i:02d}", state=st, cpus_alloc=4 if st == "MIXED" else 0))
    names = [n["name"] for n in daemon.nodes]
    daemon.partitions = [dict(daemon.partitions[0], nodes=names)]
    out = sinfo_render(daemon, []).splitlines()
    assert out[0] == "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"
    assert out[1:] == [
        "gpu*         up   infinite      3   idle gpu[01-02,04]",
        "gpu*         up   infinite      1    mix gpu03",
        "gpu*         up   infinite      1  down* gpu05",
        "gpu*         up   infinite      1  drain gpu06",
    ]
    assert sinfo_render(daemon, ["-h", "-t", "idle", "-o", "%D %N"]) == "3 gpu[01-02,04]\n"
    assert sinfo_render(daemon, ["-h", "-s"]) == "gpu*         up   infinite          1/3/2/6 gpu[01-06]\n"
    assert sinfo_render(daemon, ["-h", "-o", "%C"]) == "4/60/32/96\n"
    daemon.nodes[5]["reason"] = "bad fan"
    daemon.nodes[5]["reason_user"] = "root"
    daemon.nodes[5]["reason_time"] = ts("2026-11-30T10:00:00")
    assert sinfo_render(daemon, ["-R"]).splitlines() == [
        "REASON               USER      TIMESTAMP           NODELIST",
        "none                 Unknown   Unknown             gpu05",
        "bad fan              root      2026-11-30T10:00:00 gpu06",
    ]


def test_sinfo_partition_filter(daemon):
    assert sinfo_render(daemon, ["-h", "-p", "debug"]) == "debug        up    1:00:00      1    mix vm\n"


def show(daemon, argv, capsys):
    rc = scontrol.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv,name,first", [
    (["show", "job", "84"], "scontrol_job_84.txt", "JobId=84 JobName=train-a"),
    (["show", "job", "-d", "84"], "scontrol_job_84_d.txt", "JobId=84 JobName=train-a"),
    (["-d", "show", "job", "84"], "scontrol_job_84_d.txt", "JobId=84 JobName=train-a"),
    (["show", "job", "85"], "scontrol_job_85.txt", "JobId=85 JobName=serve-b"),
    (["show", "job", "90"], "scontrol_job_90.txt", "JobId=90 JobName=nb-over"),
    (["show", "job", "94"], "scontrol_job_94.txt",
     "JobId=94 ArrayJobId=94 ArrayTaskId=0-9%2 ArrayTaskThrottle=2 JobName=arr"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_show_job_matches_slurm(daemon, capsys, argv, name, first):
    rc, out, err = show(daemon, argv, capsys)
    assert rc == 0 and err == ""
    lines = out.split("\n")
    assert lines[0] == first
    assert "\n".join(lines[1:]) == golden(name)


def test_show_job_preempted(daemon, capsys):
    daemon.jobs = [job(938, "victim-noreq", "training", 5041, "PREEMPTED", reason="None", qos="low",
                       requeue=False, exit_code="0:15", run_time_s=3, node_list="vm", batch_host="vm",
                       submit_time=ts("2026-11-30T14:48:34"), eligible_time=ts("2026-11-30T14:48:34"),
                       start_time=ts("2026-11-30T14:48:34"), end_time=ts("2026-11-30T14:48:37"),
                       tres_alloc="cpu=1,mem=1G,node=1,billing=9,gres/gpu=4,gres/gpu:h200=4",
                       tres_per_node="gres:gpu:4", workdir="/scratch/golden/extra",
                       stdout="/scratch/golden/extra/victim-noreq.out",
                       stderr="/scratch/golden/extra/victim-noreq.out")]
    rc, out, _ = show(daemon, ["show", "job", "938"], capsys)
    assert rc == 0 and out == golden("scontrol_job_938.txt")


def test_show_node_and_partition(daemon, capsys):
    rc, out, _ = show(daemon, ["show", "node", "vm"], capsys)
    lines = out.split("\n")
    assert lines[0] == "NodeName=vm Arch=x86_64 CoresPerSocket=8 "
    assert "\n".join(lines[1:]) == golden("scontrol_node_vm.txt")
    rc, out, _ = show(daemon, ["show", "partition"], capsys)
    blocks = out.split("PartitionName=")
    assert blocks[0] == "" and [b.split("\n")[0] for b in blocks[1:]] == ["gpu", "debug"]
    assert "".join("\n".join(b.split("\n")[1:]) for b in blocks[1:]) == golden("scontrol_partition.txt")


def test_show_errors(daemon, capsys):
    daemon.jobs = []
    assert show(daemon, ["show", "job", "999999"], capsys) == \
        (1, "", "slurm_load_jobs error: Invalid job id specified\n")
    assert show(daemon, ["show", "node", "nope"], capsys) == (1, "", "Node nope not found\n")
    assert show(daemon, ["show", "bogus"], capsys)[0] == 1


def test_oneliner(daemon, capsys):
    rc, out, _ = show(daemon, ["-o", "show", "job", "88"], capsys)
    assert out.count("\n") == 1 and out.startswith("JobId=88 JobName=train-wait UserId=root(0) ")
    assert " TimeLimit=00:10:00 " in out


def test_actions_send_requests(daemon, capsys):
    assert show(daemon, ["hold", "91"], capsys) == (0, "", "")
    assert daemon.calls[-1][:3] == ("POST", "/v1/jobs/hold", {"ids": ["91"]})
    show(daemon, ["release", "91,92"], capsys)
    assert daemon.calls[-1][1:3] == ("/v1/jobs/release", {"ids": ["91", "92"]})
    show(daemon, ["requeuehold", "84"], capsys)
    assert daemon.calls[-1][1:3] == ("/v1/jobs/requeue", {"ids": ["84"], "hold": True})
    daemon.replies["/v1/jobs/hold"] = {"done": [], "errors": [
        {"id": "84", "message": "Job is no longer pending execution"}]}
    assert show(daemon, ["hold", "84"], capsys) == (1, "", "Job is no longer pending execution for job 84\n")


def test_update(daemon, capsys):
    rc, _, _ = show(daemon, ["update", "JobId=88", "TimeLimit=1-02:03:04", "Nice=10", "Account=serving",
                             "Name=new", "Comment=hi there"], capsys)
    assert rc == 0  # 1-02:03:04 is stored rounded up to the minute (Slurm's time_str2mins)
    assert daemon.calls[-1][1:3] == ("/v1/jobs/update", {"ids": ["88"], "changes": {
        "time_limit_s": 93840, "nice": 10, "account": "serving", "name": "new", "comment": "hi there"}})
    show(daemon, ["update", "jobid=88", "timelimit=UNLIMITED"], capsys)
    assert daemon.calls[-1][2]["changes"] == {"time_limit_s": -1}
    rc, _, err = show(daemon, ["update", "JobId=88", "TimeLimit=abc"], capsys)
    assert (rc, err) == (1, "scontrol: error: Invalid TimeLimit value\n")  # Slurm 22.05's words
    rc, _, err = show(daemon, ["update", "JobId=88", "Bogus=1"], capsys)
    assert rc == 1 and "not supported" in err


def test_sinfo_json(daemon, capsys):
    import json
    assert sinfo.main(["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"][0]["name"] == "vm" and doc["nodes"][0]["state"] == "mixed"
    assert doc["nodes"][0]["alloc_cpus"] == 9 and doc["nodes"][0]["gres"] == "gpu:h200:4"
    assert [(p["name"], p["maximum_time"]) for p in doc["partitions"]] == [("gpu", "UNLIMITED"), ("debug", 60)]


def test_sinfo_node_oriented_and_long(daemon):
    assert sinfo_render(daemon, ["-N"]) == ("NODELIST   NODES PARTITION STATE \n"
                                            "vm             1      gpu* mix   \n"
                                            "vm             1     debug mix   \n")
    lines = sinfo_render(daemon, ["-l"]).splitlines()
    assert lines[1:] == [
        "PARTITION AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE NODELIST",
        "gpu*         up   infinite 1-infinite   no       NO        all      1       mixed vm",
        "debug        up    1:00:00 1-infinite   no       NO        all      1       mixed vm"]


def test_show_job_requeued_pending(daemon, capsys):
    # views/04_preemption.txt: job 99 after preemption with requeue, held off until its begin time
    daemon.jobs = [job(99, "victim", "training", 5041, reason="BeginTime", qos="low", restarts=1,
                       submit_time=ts("2026-11-30T14:45:04"), eligible_time=ts("2026-11-30T14:47:05"),
                       begin_time=ts("2026-11-30T14:47:05"),
                       tres_req="cpu=1,mem=1G,node=1,billing=9,gres/gpu=4", tres_per_node="gres:gpu:4")]
    rc, out, _ = show(daemon, ["show", "job", "99"], capsys)
    assert rc == 0 and out == golden("scontrol_job_99_requeued.txt")
