"""`scontrol update NodeName=... State=... Reason=...` (issue 15: batchd refused it with
"Update of this parameter is not supported"). Expected texts recorded from Slurm 22.05
(../shared/slurm-peer, node `vm`, 2026-12-04) with:

    scontrol update NodeName=vm State=DRAIN Reason="fan broken"   -> rc 0, no output
    scontrol update NodeName=vm State=DRAIN                       -> rc 1, stderr:
        You must specify a reason when DOWNING or DRAINING a node. Request denied
    scontrol update NodeName=vm State=RESUME                      -> rc 0
    scontrol update NodeName=nosuch State=RESUME                  -> rc 1, stderr:
        slurm_update error: Invalid node name specified
    scontrol update NodeName=vm State=BOGUS                       -> rc 1, stderr:
        Invalid input: State=BOGUS / Request aborted / Valid states are: NoResp DRAIN FAIL
        FUTURE RESUME POWER_DOWN POWER_UP UNDRAIN / Not all states are valid given a node's prior state
    scontrol update NodeName=vm State=DOWN Reason=x               -> rc 0
    (as user nobody) scontrol update NodeName=vm State=DRAIN Reason=x -> rc 1, stderr:
        slurm_update error: Invalid user id
"""

import pytest

from batchd.cli import client, scontrol

BAD_STATE = ("Invalid input: State=BOGUS\nRequest aborted\nValid states are: NoResp DRAIN FAIL FUTURE RESUME "
             "POWER_DOWN POWER_UP UNDRAIN\nNot all states are valid given a node's prior state\n")


@pytest.fixture
def calls(monkeypatch):
    sent = []

    def request(method, path, body=None, query=None, timeout=60.0):
        sent.append((method, path, body))
        if body["node"] == "nosuch":
            raise client.DaemonError("NotFound", "Invalid node name specified: nosuch", 1, 404)
        if body["node"] == "locked":
            raise client.DaemonError("AccessDenied", "only an administrator may change a node's state", 1, 403)
        return {"node": body["node"], "state": "DRAIN"}

    monkeypatch.setattr(client, "request", request)
    return sent


@pytest.mark.parametrize("args, err, rc, sent", [
    (["NodeName=vm", "State=DRAIN", "Reason=fan broken"], "", 0, [("vm", "drain", "fan broken")]),
    (["NodeName=vm", "State=DRAIN"], "You must specify a reason when DOWNING or DRAINING a node. Request denied\n",
     1, []),
    (["NodeName=vm", "State=DOWN"], "You must specify a reason when DOWNING or DRAINING a node. Request denied\n",
     1, []),
    (["NodeName=vm", "State=RESUME"], "", 0, [("vm", "resume", None)]),
    (["NodeName=vm", "State=undrain"], "", 0, [("vm", "resume", None)]),
    (["NodeName=nosuch", "State=RESUME"], "slurm_update error: Invalid node name specified\n", 1,
     [("nosuch", "resume", None)]),
    (["NodeName=vm", "State=BOGUS"], BAD_STATE, 1, []),
    (["NodeName=vm", "State=DOWN", "Reason=x"], "", 0, [("vm", "down", "x")]),
    (["NodeName=locked", "State=DRAIN", "Reason=x"], "slurm_update error: Invalid user id\n", 1,
     [("locked", "drain", "x")]),
    (["NodeName=gpu[01-02]", "State=DRAIN", "Reason=r"], "", 0, [("gpu01", "drain", "r"), ("gpu02", "drain", "r")]),
    (["NodeName=vm", "Weight=3"], "Update of this parameter is not supported: Weight=3\nRequest aborted\n", 1, []),
], ids=lambda x: None)
def test_node_update_as_slurm(calls, args, err, rc, sent):
    assert scontrol.update(args) == (err, rc)
    assert [(b["node"], b["action"], b["reason"]) for _m, _p, b in calls] == sent
    assert all(p == "/v1/nodes/state" for _m, p, _b in calls)
