"""bsub, bjobs and bkill against a real dev daemon (fixture in conftest.py)."""

import re
import time


def submitted(r) -> int:
    m = re.fullmatch(r"Job <(\d+)> is submitted to (?:default )?queue <([\w-]+)>\.\n", r.stdout)
    assert m, r.stdout
    return int(m.group(1))


def test_bsub_runs_a_job_in_the_queue_account(lsf_cluster):
    c = lsf_cluster
    r = c.run("bsub", "-q", "training", "-J", "hello", "-n", "2", "-W", "5", "-o", "out.%J",
              "-P", "projX", "echo", "hello from", "lsf")
    assert r.stdout.endswith("is submitted to queue <training>.\n")
    jid = submitted(r)
    j = c.wait(jid, ("COMPLETED", "FAILED"))
    assert j["state"] == "COMPLETED"
    assert (j["account"], j["name"], j["time_limit_s"], j["ntasks"], j["comment"]) == \
        ("training", "hello", 300, 2, "projX")
    assert (c.root / f"out.{jid}").read_text() == "hello from lsf\n"
    out = c.run("bjobs", "-a", "-w", str(jid)).stdout.splitlines()
    assert out[0].split() == ["JOBID", "USER", "STAT", "QUEUE", "FROM_HOST", "EXEC_HOST", "JOB_NAME", "SUBMIT_TIME"]
    assert out[1].split()[:4] == [str(jid), out[1].split()[1], "DONE", "training"]


def test_bsub_from_stdin_with_directives_and_default_queue(lsf_cluster):
    c = lsf_cluster
    script = "#BSUB -J viastdin\n#BSUB -oo stdin.%J\necho $SLURM_JOB_NAME\n"
    r = c.run("bsub", input=script)
    assert "is submitted to default queue <" in r.stdout
    jid = submitted(r)
    c.wait(jid, ("COMPLETED",))
    assert (c.root / f"stdin.{jid}").read_text() == "viastdin\n"


def test_dependency_pending_reason_and_bkill(lsf_cluster):
    c = lsf_cluster
    first = submitted(c.run("bsub", "-q", "training", "-J", "first", "sleep", "30"))
    c.wait(first, ("RUNNING",))
    second = submitted(c.run("bsub", "-q", "training", "-w", f"done({first})", "true"))
    deadline = time.time() + 10
    while c.job(second)["reason"] != "Dependency" and time.time() < deadline:
        time.sleep(0.1)
    pend = c.run("bjobs", "-p").stdout.splitlines()
    row = next(i for i, line in enumerate(pend) if line.split()[0] == str(second))
    assert pend[row].split()[2] == "PEND"
    assert pend[row + 1] == " Job dependency condition not satisfied;"
    running = c.run("bjobs", "-r", "-noheader").stdout.split()
    assert running[:3] == [str(first), running[1], "RUN"]
    r = c.run("bkill", str(first))
    assert r.stdout == f"Job <{first}> is being terminated\n"
    assert c.wait(first, ("CANCELLED",))["state"] == "CANCELLED"
    # afterok on a cancelled job can never be satisfied
    deadline = time.time() + 10
    while c.job(second)["reason"] != "DependencyNeverSatisfied" and time.time() < deadline:
        time.sleep(0.1)
    assert c.job(second)["reason"] == "DependencyNeverSatisfied"
    assert c.run("bkill", "0").stdout == f"Job <{second}> is being terminated\n"
    r = c.run("bkill", "999999", check=False)
    assert r.returncode == 255 and r.stderr == "Job <999999>: No matching job found\n"


def test_refusals_store_nothing(lsf_cluster):
    c = lsf_cluster
    before = c.run("bjobs", "-a", "-u", "all", check=False).stdout
    r = c.run("bsub", "-ISs", "bash", check=False)
    assert r.returncode == 255 and "interactive jobs over SSH or X11" in r.stderr and r.stdout == ""
    r = c.run("bsub", "-q", "nosuchqueue", "true", check=False)
    assert r.returncode == 255
    assert r.stderr == "nosuchqueue: No such queue, or you may not submit to it. Job not submitted.\n"
    r = c.run("bsub", "-gpu", "num=9", "true", check=False)
    # batchd's reason after the message (issue 15.6), as sbatch's second line
    assert (r.returncode, r.stderr) == (255, "Requested node configuration is not available: 9 GPUs asked on one "
                                             "node; the most on one node of partition gpu is 4 (node1), 4 in the "
                                             "partition. Job not submitted.\n")
    r = c.run("bsub", "-gpu", "num=1:gmodel=a100", "true", check=False)
    assert (r.returncode, r.stderr) == (255, "Requested node configuration is not available: no node of partition "
                                             "gpu offers gres/gpu:a100; GPU types there: h200. Job not submitted.\n")
    # -U is sbatch's --reservation: batchd has none, so any name is refused as sbatch refuses it
    r = c.run("bsub", "-U", "foo", "true", check=False)
    assert (r.returncode, r.stderr) == (255, "Requested reservation is invalid. Job not submitted.\n")
    assert c.run("bjobs", "-a", "-u", "all", check=False).stdout == before


def test_mail_options_are_accepted_with_one_warning(lsf_cluster):
    r = lsf_cluster.run("bsub", "-B", "-N", "-u", "me@example.org", "true")
    assert r.returncode == 0 and r.stdout.startswith("Job <")
    assert r.stderr == "bsub: warning: -u, -B, -N are ignored: batchd sends no mail\n"


def test_job_array_elements(lsf_cluster):
    c = lsf_cluster
    jid = submitted(c.run("bsub", "-q", "training", "-J", "arr[1-3]", "-oo", "arr.%J.%I",
                          "sh", "-c", "'echo $SLURM_ARRAY_TASK_ID; sleep 30'"))
    deadline = time.time() + 20
    while time.time() < deadline:
        rows = [x.split() for x in c.run("bjobs", "-noheader", "-w", str(jid)).stdout.splitlines()]
        if len(rows) == 3 and all(r[2] == "RUN" for r in rows):
            break
        time.sleep(0.2)
    assert [(r[0], r[2], r[-4]) for r in rows] == [(str(jid), "RUN", f"arr[{i}]") for i in (1, 2, 3)]
    r = c.run("bkill", f"{jid}[2]")
    assert r.stdout == f"Job <{jid}[2]> is being terminated\n"
    r = c.run("bkill", str(jid))
    assert r.returncode == 0 and r.stdout == f"Job <{jid}> is being terminated\n", r.stdout
    deadline = time.time() + 20
    while c.run("bjobs", "-noheader", check=False).stdout.strip() and time.time() < deadline:
        time.sleep(0.2)
    for i in (1, 2, 3):
        assert (c.root / f"arr.{jid}.{i}").read_text().startswith(f"{i}\n")


def test_bsub_K_waits_and_returns_the_exit_code(lsf_cluster):
    r = lsf_cluster.run("bsub", "-K", "-q", "training", "exit 3", check=False)
    assert r.returncode == 3, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1:] == ["<<Waiting for dispatch ...>>", "<<Job is finished>>"]


def test_bsub_I_relays_output_and_stdin_and_exits_with_the_commands_code(lsf_cluster):
    c = lsf_cluster
    r = c.run("bsub", "-I", "-J", "inter", "read x; echo got $x; echo to-err >&2; exit 4", check=False, input="abc\n")
    assert r.returncode == 4 and r.stdout == "got abc\n"
    lines = r.stderr.splitlines()
    m = re.fullmatch(r"Job <(\d+)> is submitted to (?:default )?queue <[\w-]+>\.", lines[0])
    assert m, lines
    assert lines[1] == "<<Waiting for dispatch ...>>" and re.fullmatch(r"<<Starting on \S+>>", lines[2])
    assert lines[3:] == ["to-err"]
    job = c.wait(int(m.group(1)), ("FAILED",))
    assert job["name"] == "inter" and job["exit_code"] == "4:0"


def test_bsub_Is_gives_the_shell_a_terminal(lsf_cluster):
    from tests.harness import BIN
    from tests.ptydriver import PtyDriver

    c = lsf_cluster
    d = PtyDriver([str(BIN / "bsub"), "-Is", "sh", "-i"], dict(c.env, PS1="LSF$ ", TERM="xterm"), str(c.root),
                  30, 90)
    try:
        d.expect(r"<<Starting on \S+>>")
        d.expect(r"LSF\$ ")
        d.send("tty; stty size\n")
        d.expect(r"/dev/pts/\d+\r\n30 90")
        d.send("exit 3\n")
        assert d.wait() == 3
        assert "Exited with exit code" not in d.text()  # LSF says nothing at the end
    finally:
        d.close()
