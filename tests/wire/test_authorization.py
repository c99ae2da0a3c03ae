"""Authorization lives in the service (Service.require_admin, Service.require_owner) and is
tested without a socket: a plain user gets the permission error for every admin-only
operation and for every operation on another user's job, the owner and an administrator
do not; batchd/protocol.py's "who" column says the same of every endpoint."""

from __future__ import annotations

import pytest
from endpoint_cases import ADMIN, CASES, OTHER, OWNER, make_world
from wire_helpers import call

from batchd import protocol
from batchd.accounting import routes
from batchd.errors import InvalidRequest, PermissionDenied
from batchd.server import accounts, steps

WHO = {(e[0], e[1]): e[6] for e in protocol.ENDPOINTS}
DENIED = ("Access/permission denied", "Invalid user id")


@pytest.fixture
def world(tmp_path):
    w = make_world(tmp_path)
    yield w
    w.close()


def test_require_admin_and_require_owner(world):
    svc = world.svc
    job = world.store.get_job(world.jobs["pending"])
    svc.require_admin(ADMIN)
    with pytest.raises(PermissionDenied, match="only an administrator may drain nodes"):
        svc.require_admin(OWNER, "drain nodes")
    svc.require_owner(OWNER, job)
    svc.require_owner(ADMIN, job)
    with pytest.raises(PermissionDenied, match="Access/permission denied") as e:
        svc.require_owner(OTHER, job)
    assert (e.value.status, e.value.code) == (403, "AccessDenied")


# ---------------------------------------------------------------------------- the service
ADMIN_ONLY = [
    ("node_state", lambda w, c: w.svc.set_node_state(c, {"node": "vm", "action": "drain", "reason": "x"})),
    ("apply", lambda w, c: accounts.apply_doc(w.svc, c, {"account": [{"name": "team"}]}, False)),
    ("apply_dry_run", lambda w, c: accounts.apply_doc(w.svc, c, {"account": [{"name": "team"}]}, True)),
    ("modify", lambda w, c: accounts.modify(w.svc, c, {"op": "account.add", "name": "team"})),
    ("set_prices", lambda w, c: routes.set_prices(w.svc, c, {}, {"prices": [
        {"tres": "cpu", "per_hour": "1", "currency": "EUR", "valid_from": "2026-01-01"}]})),
    ("rollup", lambda w, c: routes.rollup(w.svc, c, {}, {})),
    ("spread_idle", lambda w, c: routes.report(w.svc, c, {"spread_idle": "1"}, None)),
]


@pytest.mark.parametrize("op", [o[1] for o in ADMIN_ONLY], ids=[o[0] for o in ADMIN_ONLY])
def test_a_plain_user_may_not_do_what_is_an_administrators(world, op):
    with pytest.raises(PermissionDenied, match="only an administrator may"):
        op(world, OWNER)
    op(world, ADMIN)  # the same, as root, goes through


def test_authorization_comes_before_validation(world):
    """A plain user learns nothing of the tree from a refused change."""
    with pytest.raises(PermissionDenied):
        accounts.modify(world.svc, OWNER, {"op": "account.remove", "name": "nosuch"})
    with pytest.raises(InvalidRequest, match="no such account"):
        accounts.modify(world.svc, ADMIN, {"op": "account.remove", "name": "nosuch"})


def test_nothing_changed_for_the_refused(world):
    with pytest.raises(PermissionDenied):
        world.svc.set_node_state(OWNER, {"node": "vm", "action": "down", "reason": "x"})
    with pytest.raises(PermissionDenied):
        accounts.modify(world.svc, OWNER, {"op": "account.add", "name": "team"})
    assert [n.state for n in world.store.list_nodes()] == ["IDLE"]
    assert "team" not in {a.name for a in world.store.list_accounts()}


JOB_CHANGES = [
    ("cancel", "pending", lambda w, c, j: w.svc.signal_jobs(c, {"ids": [str(j)]}), "Access/permission denied"),
    ("signal", "running", lambda w, c, j: w.svc.signal_jobs(c, {"ids": [str(j)], "signal": 10}),
     "Access/permission denied"),
    ("hold", "pending", lambda w, c, j: w.svc.hold(c, [str(j)]), "Access/permission denied"),
    ("release", "held", lambda w, c, j: w.svc.hold(c, [str(j)], release=True), "Access/permission denied"),
    ("requeue", "running", lambda w, c, j: w.svc.requeue(c, [str(j)]), "Access/permission denied"),
    ("update", "pending", lambda w, c, j: w.svc.update(c, [str(j)], {"comment": "mine now"}), "Invalid user id"),
    ("update_time_limit", "pending", lambda w, c, j: w.svc.update(c, [str(j)], {"time_limit_s": 60}),
     "Invalid user id"),
]


@pytest.mark.parametrize("which, op, words", [c[1:] for c in JOB_CHANGES], ids=[c[0] for c in JOB_CHANGES])
def test_a_plain_user_may_not_change_another_users_job(world, which, op, words):
    job_id = world.jobs[which]
    before = world.store.get_job(job_id)
    reply = op(world, OTHER, job_id)
    assert reply == {"done": [], "errors": [{"id": str(job_id), "message": words}]}
    assert world.store.get_job(job_id) == before  # untouched
    assert op(world, OWNER, job_id)["done"] == [str(job_id)]  # its owner may


@pytest.mark.parametrize("which, op, words", [c[1:] for c in JOB_CHANGES], ids=[c[0] for c in JOB_CHANGES])
def test_an_administrator_may_change_any_job_and_is_audited(world, which, op, words):
    job_id = world.jobs[which]
    assert op(world, ADMIN, job_id)["done"] == [str(job_id)]
    assert any(a["uid"] == 0 and a["detail"].get("job") == job_id for a in world.store.list_audit())


def test_filters_without_ids_select_only_the_callers_own_jobs(world):
    """scancel -u / -A without ids: a plain user's filter never reaches another's jobs."""
    mine = world.svc.submit(OTHER, _spec(world))["job_id"]
    reply = world.svc.signal_jobs(OTHER, {"filters": {"accounts": ["default"]}})
    assert reply["done"] == [str(mine)] and reply["errors"] == []
    assert world.store.get_job(world.jobs["pending"]).state == "PENDING"


def _spec(world):
    from wire_helpers import spec

    return spec(world.tmp, name="others")


STEP_OPS = [
    ("step_create", lambda w, c: steps.create(w.svc, c, {"job_id": w.jobs["running"], "argv": ["id"]})),
    ("step_cancel", lambda w, c: steps.cancel(w.svc, c, {"job_id": w.jobs["running"], "step_id": w.jobs["step"]})),
]


@pytest.mark.parametrize("op", [o[1] for o in STEP_OPS], ids=[o[0] for o in STEP_OPS])
def test_steps_of_another_users_job_are_refused(world, op):
    with pytest.raises(PermissionDenied, match="Access/permission denied"):
        op(world, OTHER)
    op(world, OWNER)
    op(world, ADMIN)


# ---------------------------------------------------------------------------- the table
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_tables_who_column_holds_for_a_plain_user(world, case):
    """Each endpoint's good request, by a user who is neither an administrator nor the
    jobs' owner: ADMIN endpoints answer 403, OWNER endpoints refuse every job (403, or each
    job's Slurm error), ANYONE endpoints answer."""
    _id, key, request, _nonempty = case
    target, body = request(world)
    status, reply = call(world.svc, key[0], target, body, caller=OTHER)
    who = WHO[key]
    if who == protocol.ADMIN:
        assert status == 403 and reply["error"]["code"] == "AccessDenied", reply
    elif who == protocol.OWNER:
        if status == 200:
            assert reply["done"] == [] and reply["errors"], reply
            assert all(e["message"] in DENIED for e in reply["errors"]), reply
        else:
            assert status == 403 and reply["error"]["code"] == "AccessDenied", reply
    else:
        assert status == 200, reply
