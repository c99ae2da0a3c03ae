"""`batchd account list|show|add|modify|remove`: one change at a time."""

import json

import click

from batchd.cli.admin import call, parse_resource_opts
from batchd.cli.helpfmt import SummaryGroup


@click.group("account", cls=SummaryGroup)
def command():
    """Accounts (team queues): quotas, limits, over-quota weights, priority, shares."""


def _res(quota, limit, weight, lending):
    res = {}
    for values, field in ((quota, "quota"), (limit, "limit"), (weight, "over_quota_weight"),
                          (lending, "lending_limit")):
        for name, f in parse_resource_opts(values, field).items():
            res.setdefault(name, {}).update(f)
    return res


_opts = [
    click.option("--parent", help="Parent account (default root)."),
    click.option("--priority", type=int, help="Queue priority: higher gets idle capacity first."),
    click.option("--shares", type=int, help="Fair-share shares."),
    click.option("--quota", multiple=True, metavar="TRES=N", help="Guaranteed amount, e.g. gres/gpu=6."),
    click.option("--limit", multiple=True, metavar="TRES=N", help="Hard cap, -1 = none."),
    click.option("--weight", multiple=True, metavar="TRES=W", help="Over-quota weight."),
    click.option("--lending-limit", multiple=True, metavar="TRES=N", help="At most this much idle quota is lent."),
    click.option("--policy", multiple=True, metavar="KEY=VALUE",
                 help="An association limit or preemption key (docs: batchd/slurm/assocpolicy.py, "
                      "docs/preemption.md), VALUE in JSON or a bare word: "
                      "max_jobs=4, 'qos=[\"normal\",\"high\"]', default_qos=high, "
                      "'grp_tres_mins={\"gres/gpu\":120000}', budget_period=month, "
                      "within_account=never, reclaim_within_cohort=lower_priority, "
                      "borrow_within_cohort=lower_priority (POLICY, or POLICY:N for a "
                      "max_priority_threshold of N), min_runtime_reclaim_s=600 (seconds) or =30:00 "
                      "(Slurm time); -1 or null removes it."),
    click.option("--dry-run", is_flag=True, help="Show the change without making it."),
]


def _policy(values):
    """--policy KEY=VALUE options as the route's `policy` changes (None: none given)."""
    out = {}
    for v in values:
        key, eq, raw = v.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"{v!r}: expected KEY=VALUE", param_hint="--policy")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw  # a bare word: a QOS or period name
    return out or None


def _with_opts(f):
    for o in reversed(_opts):
        f = o(f)
    return f


def _show(res):
    for line in res["changes"]:
        click.echo(line)
    if not res["changes"]:
        click.echo("no changes")


@command.command("list")
def list_():
    """List accounts with their resources."""
    doc = call("GET", "/v1/accounts")
    click.echo(f"{'Account':<16} {'Parent':<12} {'Priority':>8} {'Shares':>6}  Resources")
    for a in doc["account"]:
        res = "; ".join(f"{k}: " + ",".join(f"{f}={v}" for f, v in sorted(r.items()))
                        for k, r in sorted(a.get("resources", {}).items()))
        click.echo(f"{a['name']:<16} {a.get('parent') or '':<12} {a['priority']:>8} {a['shares']:>6}  {res}")
        if a.get("policy"):
            click.echo(f"{'':<16} policy: {policy_text(a['policy'])}")


def policy_text(pol):
    """A policy table on one line, `KEY=VALUE` as --policy takes them (borrow_within_cohort
    as POLICY[:N], TRES tables as gres/gpu=4,cpu=8, lists comma-separated)."""
    parts = []
    for k, v in pol.items():
        if k == "borrow_within_cohort" and isinstance(v, dict):
            t = v.get("max_priority_threshold")
            v = f"{v.get('policy')}" + ("" if t is None else f":{t}")
        elif isinstance(v, dict):
            v = ",".join(f"{r}={n}" for r, n in v.items())
        elif isinstance(v, list):
            v = ",".join(str(x) for x in v)
        parts.append(f"{k}={v}")
    return " ".join(parts)


@command.command("show")
@click.argument("name", required=False)
def show(name):
    """Show one account (or all) as JSON, members included."""
    doc = call("GET", "/v1/accounts")
    if name:
        accts = [a for a in doc["account"] if a["name"] == name]
        if not accts:
            raise click.ClickException(f"account {name}: no such account")
        doc = {"account": accts, "user": [u for u in doc["user"] if u["account"] == name]}
    click.echo(json.dumps(doc, indent=2))


@command.command("add")
@click.argument("name")
@_with_opts
def add(name, parent, priority, shares, quota, limit, weight, lending_limit, policy, dry_run):
    """Add an account."""
    _show(call("POST", "/v1/accounts/modify", {"op": "account.add", "name": name, "parent": parent,
                                               "priority": priority, "shares": shares, "dry_run": dry_run,
                                               "resources": _res(quota, limit, weight, lending_limit),
                                               **({"policy": _policy(policy)} if policy else {})}))


@command.command("modify")
@click.argument("name")
@_with_opts
def modify(name, parent, priority, shares, quota, limit, weight, lending_limit, policy, dry_run):
    """Change fields of an account."""
    _show(call("POST", "/v1/accounts/modify", {"op": "account.modify", "name": name, "parent": parent,
                                               "priority": priority, "shares": shares, "dry_run": dry_run,
                                               "resources": _res(quota, limit, weight, lending_limit),
                                               **({"policy": _policy(policy)} if policy else {})}))


@command.command("remove")
@click.argument("name")
@click.option("--dry-run", is_flag=True)
def remove(name, dry_run):
    """Remove an account (it must have no child accounts)."""
    _show(call("POST", "/v1/accounts/modify", {"op": "account.remove", "name": name, "dry_run": dry_run}))
