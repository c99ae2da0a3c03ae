"""sacctmgr against Slurm 22.05's recordings (tests/cli/golden/sacctmgr, README.md there):
batchd's state is built equivalent to the peer's at each recording, the command runs
through the real service and store (client.request dispatched in process), and stdout,
stderr and the exit code must equal the recording's."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from batchd.cli import client, sacctmgr
from batchd.errors import BatchdError
from batchd.server import api
from batchd.server.service import Caller, Service
from tests.refstore import reference_store

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "cli" / "golden" / "sacctmgr"
ROOT = Caller(uid=0, gid=0)
NOBODY = Caller(uid=65534, gid=65534)


def cases() -> dict[str, tuple[int, str]]:
    """name -> (exit code, command) from the README's table."""
    out = {}
    for line in (GOLDEN / "README.md").read_text().splitlines():
        if line.startswith("| `") and "|" in line[3:]:
            name, rc, cmd = [c.strip().strip("`") for c in line.strip("|").split("|")]
            out[name] = (int(rc), cmd)
    return out


@pytest.fixture
def peer(tmp_path, monkeypatch):
    """A service over a fresh store with examples/slurm-reference.toml (cluster refcluster,
    QOS normal/low/high) and the peer's accounts; `peer.caller` is who calls."""
    cfg, store = reference_store(tmp_path / "b.db", dev=False)
    svc = Service(cfg, store)

    class Peer:
        caller = ROOT
        service = svc

        def apply(self, doc):
            from batchd.server.accounts import apply_doc
            apply_doc(svc, ROOT, doc, False)

    p = Peer()

    def request(method, path, body=None, query=None, timeout=60.0):
        try:
            return api.ROUTES[(method, path)](svc, p.caller, query or {}, body)
        except BatchdError as e:
            raise client.DaemonError(e.code, str(e), e.exit_code, e.status) from None

    monkeypatch.setattr(client, "request", request)
    yield p
    store.close()


def run(capsys, cmd: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    import shlex
    argv = shlex.split(cmd)[1:]
    rc = sacctmgr.main(argv)
    o, e = capsys.readouterr()
    return rc, o, e


# the state of the peer after the add_* recordings, in batchd's words: Slurm's accounts
# under root get QOS normal (the root association's), which batchd says explicitly
SCENE = {"account": [
    {"name": "smalpha", "shares": 1, "policy": {"qos": ["normal"]}},
    {"name": "smbeta", "parent": "smalpha", "shares": 7},
    {"name": "smgamma", "parent": "smalpha", "shares": 3,
     "resources": {"gres/gpu": {"limit": 8}, "cpu": {"limit": 64}},
     "policy": {"grp_tres_mins": {"gres/gpu": 6000}, "max_jobs": 4, "max_submit_jobs": 10,
                "max_tres_per_job": {"gres/gpu": 2}, "qos": ["high", "normal"], "default_qos": "normal"}}],
    "user": [{"name": "smuser1", "account": "smgamma", "default": True},
             {"name": "smuser2", "account": "smbeta", "shares": 5, "default": True},
             {"name": "smuser2", "account": "smgamma"}]}


def expect(name, rc, out, err):
    want_rc = cases()[name][0]
    want_out = (GOLDEN / f"{name}.txt").read_text()
    errf = GOLDEN / f"{name}.err"
    assert (rc, out) == (want_rc, want_out)
    assert err == (errf.read_text() if errf.exists() else "")


@pytest.mark.parametrize("name", ["show_account_where", "show_assoc_where", "show_assoc_format", "show_assoc_P",
                                  "show_assoc_p_n", "show_user_where", "show_assoc_user1", "show_tres",
                                  "show_tres_P", "show_qos_format"])
def test_show_layouts_as_recorded(peer, capsys, name):
    peer.apply(SCENE)
    cfg = peer.service.cfg
    # the peer's QOS high has Priority=1000 (examples/slurm-reference.toml says 100)
    cfg.qos = [dataclasses.replace(q, priority=1000) if q.name == "high" else q for q in cfg.qos]
    rc, out, err = run(capsys, cases()[name][1])
    expect(name, rc, out, err)


def test_add_and_modify_messages_and_state(peer, capsys):
    seq = ["add_account_default", "add_account_child", "add_account_limits", "add_user", "add_user_default",
           "add_user_second"]
    for name in seq:
        rc, out, err = run(capsys, cases()[name][1])
        expect(name, rc, out, err)
    # the accounts added to root are limited to normal in Slurm; batchd states it
    assert run(capsys, "sacctmgr -i modify account smalpha set QOS=normal")[0] == 0
    for name in ["show_assoc_where", "show_assoc_format", "show_user_where"]:
        rc, out, err = run(capsys, cases()[name][1])
        expect(name, rc, out, err)
    for name in ["modify_account", "modify_account_where", "modify_qos_plus", "modify_user", "modify_user_where"]:
        rc, out, err = run(capsys, cases()[name][1])
        expect(name, rc, out, err)
    rc, out, err = run(capsys, cases()["show_assoc_after_modify"][1])
    expect("show_assoc_after_modify", rc, out, err)
    for name in ["delete_user", "delete_account"]:
        rc, out, err = run(capsys, cases()[name][1])
        expect(name, rc, out, err)


@pytest.mark.parametrize("name", ["err_qos_unknown", "err_add_qos_unknown", "err_modify_unknown_account",
                                  "err_add_user_unknown_account", "err_add_account_parent_unknown",
                                  "err_add_account_exists", "err_delete_unknown", "err_unknown_entity",
                                  "err_bad_format"])
def test_errors_as_recorded(peer, capsys, name):
    peer.apply(SCENE)
    rc, out, err = run(capsys, cases()[name][1])
    expect(name, rc, out, err)


def test_non_admin_is_refused_and_nothing_changes(peer, capsys):
    peer.apply(SCENE)
    peer.caller = NOBODY
    rc, out, err = run(capsys, "sacctmgr -i modify account smbeta set MaxJobs=3")
    expect("err_nonadmin", rc, out, err)
    peer.caller = ROOT
    beta = next(a for a in peer.service.store.list_accounts() if a.name == "smbeta")
    assert not beta.policy


def test_prompt_no_and_closed_stdin_discard(peer, capsys, monkeypatch):
    import io
    peer.apply(SCENE)
    for text in ("n\n", ""):
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        monkeypatch.setattr("select.select", lambda r, w, x, t: (r, [], []))
        rc, out, err = run(capsys, "sacctmgr modify account smbeta set MaxJobs=7")
        expect("prompt_no", rc, out, err)
    assert run(capsys, "sacctmgr -n -P show assoc where account=smbeta user= format=maxjobs")[1] == "\n"
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    rc, out, err = run(capsys, "sacctmgr modify account smbeta set MaxJobs=7")
    expect("prompt_yes", rc, out, err)
    assert run(capsys, "sacctmgr -n -P show assoc where account=smbeta user= format=maxjobs")[1] == "7\n"


def test_grptres_below_quota_is_batchds_refusal(peer, capsys):
    peer.apply({"account": [{"name": "t", "resources": {"gres/gpu": {"quota": 4}}}]})
    rc, out, err = run(capsys, "sacctmgr -i modify account t set GrpTRES=gres/gpu=2")
    assert (rc, out) == (1, "")
    assert err == "sacctmgr: error: account t.resources.gres/gpu.limit: limit 2 is below the quota 4\n"
    rc, out, _ = run(capsys, "sacctmgr -n -P show assoc where account=t user= format=grptres")
    assert out == "gres/gpu=4\n"  # the quota is the cap while no limit is set


def test_qos_is_refused_with_the_reason(peer, capsys):
    for cmd in ("sacctmgr -i add qos x", "sacctmgr -i modify qos normal set Priority=3", "sacctmgr delete qos low"):
        rc, out, err = run(capsys, cmd)
        assert rc == 1 and out == "" and "batchd.toml" in err


def test_user_limits_and_policy_keys(peer, capsys):
    peer.apply(SCENE)
    assert run(capsys, "sacctmgr -i modify user smuser1 set GrpTRES=gres/gpu=2 MaxSubmitJobs=3")[0] == 0
    doc = peer.service.store.list_associations()
    pol = next(a for a in doc if a["user"] == "smuser1")["policy"]
    assert pol == {"max_tres_per_user": {"gres/gpu": 2}, "max_submit_jobs": 3}
    assert run(capsys, "sacctmgr -i modify account smgamma set GrpTRESRunMins=gres/gpu=100 MaxJobs=-1")[0] == 0
    a = next(x for x in peer.service.store.list_accounts() if x.name == "smgamma")
    assert a.policy["grp_tres_run_mins"] == {"gres/gpu": 100} and "max_jobs" not in a.policy
    rc, out, _ = run(capsys, "sacctmgr -P -n show user smuser1 withassoc format=user,account,grptres")
    assert (rc, out) == (0, "smuser1|smgamma|gres/gpu=2\n")


def test_sacctmgr_imports_no_heavy_modules():
    import subprocess
    import sys
    code = ("import sys, batchd.cli.sacctmgr, batchd.cli.sacctmgr_change; "
            "bad = {'click', 'sqlalchemy', 'http.client', 'urllib.request'} & set(sys.modules); print(sorted(bad))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stderr
    assert os.path.basename(sacctmgr.__file__) == "sacctmgr.py"


@pytest.mark.parametrize("name", ["show_user_s", "show_user_withassoc", "show_account_withassoc",
                                  "show_assoc_user"])
def test_with_assoc_layouts_rows_in_tree_order(peer, capsys, name):
    """Header, separator and every row as recorded; Slurm prints these rows in its database's
    order (newest association first), batchd in tree order (README: deliberate differences)."""
    peer.apply(SCENE)
    rc, out, err = run(capsys, cases()[name][1])
    want = (GOLDEN / f"{name}.txt").read_text().splitlines(keepends=True)
    got = out.splitlines(keepends=True)
    assert (rc, err, got[:2]) == (0, "", want[:2])
    assert sorted(got[2:]) == sorted(want[2:])


def test_qos_minus_the_default_qos_is_refused_and_nothing_changes(peer, capsys):
    """Slurm 22.05 (modify_qos_minus) prints that the associations would lose their default
    QOS, changes nothing and exits 0; batchd refuses with its validation message, exit 1."""
    peer.apply(SCENE)
    assert run(capsys, "sacctmgr -i modify account smbeta set QOS=normal,low DefaultQOS=low")[0] == 0
    rc, out, err = run(capsys, "sacctmgr -i modify account smbeta set QOS-=low")
    assert (rc, out) == (1, "")
    assert err.startswith("sacctmgr: error: account smbeta.policy.default_qos: 'low' is not among its qos")
    rc, out, _ = run(capsys, "sacctmgr -n -P show assoc where account=smbeta user= format=qos,defqos")
    assert out == "low,normal|low\n"


def test_show_qos_preempt_exempt_time(peer, capsys):
    # a QOS's min_runtime_preempt_s is Slurm's PreemptExemptTime (width 19, [D-]HH:MM:SS);
    # 0 (none) prints empty, as Slurm prints an unset one
    cfg = peer.service.cfg
    times = {"low": 5400, "high": 2 * 86400 + 61}
    cfg.qos = [dataclasses.replace(q, min_runtime_preempt_s=times.get(q.name, 0)) for q in cfg.qos]
    rc, out, err = run(capsys, "sacctmgr -P show qos format=name,preemptexempttime")
    assert (rc, err) == (0, "")
    assert out == "Name|PreemptExemptTime\nnormal|\nlow|01:30:00\nhigh|2-00:01:01\n"
    rc, out, _ = run(capsys, "sacctmgr -n show qos high format=name,preemptexempttime")
    assert out == "      high          2-00:01:01 \n"
