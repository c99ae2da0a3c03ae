"""sacctmgr with a real dev daemon (issue 15.3): an admin adds an account and a user, sets
MaxJobs=1 and a GrpTRESMins budget, lists them back in Slurm's layout, and the user's second
job pends AssocMaxJobsLimit."""

import os
import pwd
import time
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "cli" / "golden" / "sacctmgr"


def test_add_modify_list_and_the_limit_holds(cluster):
    me = pwd.getpwuid(os.getuid()).pw_name
    r = cluster.run("sacctmgr", "-i", "add", "account", "team", "Fairshare=3")
    assert r.stdout.startswith(" Adding Account(s)\n  team\n")
    cluster.run("sacctmgr", "-i", "add", "user", me, "Account=team")
    r = cluster.run("sacctmgr", "-i", "modify", "account", "team", "set", "MaxJobs=1",
                    "GrpTRESMins=gres/gpu=6000")
    assert r.stdout.startswith(" Modified account associations...\n")
    out = cluster.run("sacctmgr", "show", "assoc", "where", "account=team").stdout.splitlines()
    recorded = (GOLDEN / "show_assoc_where.txt").read_text().splitlines()
    assert out[:2] == recorded[:2]  # Slurm's header and separator
    cols = [(len(c), c) for c in recorded[1].split(" ")[:-1]]
    def cells(line):
        pos, vals = 0, []
        for w, _ in cols:
            vals.append(line[pos:pos + w].strip())
            pos += w + 1
        return vals
    acct, user = cells(out[2]), cells(out[3])
    assert (acct[1], acct[2], acct[4], acct[10], acct[11]) == ("team", "", "3", "gres/gpu=6000", "1")
    assert (user[1], user[2], user[11]) == ("team", me[:10], "1")  # MaxJobs inherited, as Slurm shows
    p = cluster.run("sacctmgr", "-n", "-P", "show", "user", me, "withassoc", "format=user,account,maxjobs").stdout
    assert f"{me}|team|1\n" in p
    a = cluster.submit("-A", "team", "--wrap", "sleep 5")
    b = cluster.submit("-A", "team", "--wrap", "true")
    cluster.wait(a, ("RUNNING",))
    deadline = time.time() + 10
    while cluster.job(b)["reason"] != "AssocMaxJobsLimit" and time.time() < deadline:
        time.sleep(0.1)
    j = cluster.job(b)
    assert (j["state"], j["reason"]) == ("PENDING", "AssocMaxJobsLimit")
    sq = cluster.run("squeue", "-h", "-j", str(b), "-o", "%r").stdout
    assert sq.strip() == "AssocMaxJobsLimit"
