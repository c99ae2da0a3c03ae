"""The live dashboard (`/ui/` on the TCP listener): read-only pages for a signed-in user.

    /ui/            the cluster: each node, each card with the jobs and users on it (MIG
                    instances and shards with their share), down and drained nodes
    /ui/queues      every account: quota, limit, allocated, borrowed, lent and fair share
                    per GPU resource as the scheduler sees it now, and sshare's numbers
    /ui/pending     the pending jobs with their reason and `batchd why`'s sentence for it
    /ui/jobs        the user's own jobs, with the tail of each one's output
    /ui/bill        this month's bill per team (`batchd report`), and the report page with
                    its charts (/ui/bill.html) below it
    /ui/login       a form that takes a token (`scontrol token`); /ui/logout

Signing in is the REST API's token (batchd.server.tokens): in a cookie the login form sets
(HttpOnly, SameSite=Strict, Secure under TLS, as long as the token lives) or in
`X-SLURM-USER-TOKEN`. Every number comes from the socket's requests (`batchd.server.api`)
made as the signed-in user, so the dashboard shows what the commands show that user and no
more (a non-administrator's bill has only their accounts), or from the same functions
`/metrics` uses (`batchd.server.metrics`).

Each page is HTML made here, every text escaped; `/ui/static/dash.js` (no build step, no
library) fetches the page's `?fragment=1` every 10 s and swaps it in, so the page refreshes
by itself. Everything a page loads is served from here (no CDN); the Content-Security-Policy
says so to the browser.
"""

from __future__ import annotations

import html
import logging
import os
import stat
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

from batchd.errors import BatchdError
from batchd.server import api
from batchd.server.caller import Caller, user_name
from batchd.server.dashassets import CSS, JS
from batchd.server.metrics import account_gpus, card_holders
from batchd.server.service import Service
from batchd.server.tokens import TokenError
from batchd.server.weblistener import WebReply, WebRequest
from batchd.slurm.gres import node_inventories

log = logging.getLogger(__name__)

COOKIE = "batchd_token"
TAIL_BYTES = 4096
TAIL_LINES = 15
MAX_ROWS = 500
PAGES = (("/ui/", "Cluster"), ("/ui/queues", "Queues"), ("/ui/pending", "Pending"), ("/ui/jobs", "My jobs"),
         ("/ui/bill", "Bill"))
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; frame-src 'self'; form-action 'self'; frame-ancestors 'self'; base-uri 'none'")


def e(v: Any) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _num(v: float) -> str:
    return f"{v:g}" if abs(v - round(v)) > 1e-9 else str(int(round(v)))


class Dashboard:
    def __init__(self, service: Service, secure: bool = False):
        self.service = service
        self.secure = secure
        self.pages = {"/ui/": self.cluster, "/ui/queues": self.queues, "/ui/pending": self.pending,
                      "/ui/jobs": self.my_jobs, "/ui/bill": self.bill}

    # ------------------------------------------------------------------ the door
    def __call__(self, req: WebRequest) -> WebReply:
        path = req.path
        if path == "/ui":
            return _redirect("/ui/")
        if path == "/ui/static/dash.css":
            return WebReply(200, CSS.encode(), "text/css; charset=utf-8", {"Cache-Control": "max-age=300"})
        if path == "/ui/static/dash.js":
            return WebReply(200, JS.encode(), "text/javascript; charset=utf-8", {"Cache-Control": "max-age=300"})
        if path == "/ui/login":
            return self.login(req)
        if path == "/ui/logout":
            return _redirect("/ui/login", {"Set-Cookie": f"{COOKIE}=; Path=/ui; Max-Age=0; HttpOnly; SameSite=Strict"})
        if req.method != "GET":
            return WebReply(405, b"method not allowed\n", "text/plain")
        caller = self._caller(req)
        if caller is None:
            return _redirect("/ui/login")
        query = dict(parse_qsl(req.query))
        if path == "/ui/bill.html":
            return self._page_reply(self.bill_report(caller))
        page = self.pages.get(path)
        if page is None:
            return WebReply(404, b"no such page\n", "text/plain")
        try:
            body = page(caller)
        except BatchdError as err:
            body = f'<p class="error">{e(err.message)}</p>'
        if query.get("fragment") == "1":
            return self._page_reply(body + _stamp())
        return self._page_reply(self._frame(path, caller, body))

    def _page_reply(self, text: str) -> WebReply:
        return WebReply(200, text.encode(), "text/html; charset=utf-8",
                        {"Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
                         "Referrer-Policy": "no-referrer"})

    def _caller(self, req: WebRequest) -> Caller | None:
        token = req.header("X-SLURM-USER-TOKEN") or _cookie(req.header("Cookie"), COOKIE)
        if not token:
            return None
        try:
            user = self.service.tokens.check(token)
        except (TokenError, BatchdError):
            return None
        import pwd
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            return None
        return Caller(uid=pw.pw_uid, gid=pw.pw_gid)

    def login(self, req: WebRequest) -> WebReply:
        error = ""
        if req.method == "POST":
            form = dict(parse_qsl(req.body.decode("utf-8", "replace")))
            token = (form.get("token") or "").strip().removeprefix("SLURM_JWT=")
            try:
                claims_user = self.service.tokens.check(token)
                import pwd
                pwd.getpwnam(claims_user)
            except (TokenError, KeyError) as err:
                error = f"That token does not sign you in ({e(getattr(err, 'message', 'unknown user'))})."
            except BatchdError as err:
                error = e(err.message)
            else:
                from batchd.server.tokens import verify
                exp = int(verify(self.service.tokens.key(), token)["exp"])
                age = max(1, exp - int(time.time()))
                cookie = f"{COOKIE}={token}; Path=/ui; Max-Age={age}; HttpOnly; SameSite=Strict"
                if self.secure:
                    cookie += "; Secure"
                log.info("dashboard sign-in user=%s", claims_user)
                return _redirect("/ui/", {"Set-Cookie": cookie})
        body = f"""<section class="login"><h1>batchd · {e(self.service.cfg.cluster_name)}</h1>
<p>Sign in with a token: run <code>scontrol token</code> on a node and paste what it prints.</p>
{f'<p class="error">{error}</p>' if error else ''}
<form method="post" action="/ui/login"><textarea name="token" rows="4" cols="60" required
placeholder="SLURM_JWT=eyJ..."></textarea><br><button type="submit">Sign in</button></form></section>"""
        return self._page_reply(_html_page("Sign in", body, ""))

    def _frame(self, path: str, caller: Caller, body: str) -> str:
        nav = "".join(f'<a href="{href}"{" class=here" if href == path else ""}>{e(name)}</a>' for href, name in PAGES)
        head = (f'<header><span class="brand">batchd · {e(self.service.cfg.cluster_name)}</span><nav>{nav}</nav>'
                f'<span class="who">{e(user_name(caller.uid))} · <a href="/ui/logout">sign out</a></span></header>')
        return _html_page(dict(PAGES).get(path, ""), f'{head}<main id="live">{body}{_stamp()}</main>',
                          '<script src="/ui/static/dash.js"></script>')

    def call(self, caller: Caller, target: str) -> Any:
        status, payload = api.handle(self.service, caller, "GET", target, b"")
        if status != 200:
            raise BatchdError(str((payload.get("error") or {}).get("message") or "error"))
        return payload

    # ------------------------------------------------------------------ pages
    def cluster(self, caller: Caller) -> str:
        store, cfg = self.service.store, self.service.cfg
        nodes = store.list_nodes()
        running = store.list_jobs(states=["RUNNING"])
        inv = node_inventories(nodes, int(getattr(cfg, "shard_per_gpu", 0) or 0))
        held = card_holders(inv, running)
        views = {v["name"]: v for v in self.service.nodes()["nodes"]}  # sinfo's state (MIXED, DRAINED, ...)
        out = ['<div class="nodes">']
        totals = {"allocated": 0.0, "idle": 0.0, "down": 0.0, "drained": 0.0}
        for n in sorted(nodes, key=lambda n: n.name):
            state = str(views.get(n.name, {}).get("state") or n.state).upper()
            cards = []
            for card in inv[n.name].cards if n.name in inv else ():
                holders = held.get((n.name, card.index), [])
                share = min(1.0, sum(s for _j, s, _w in holders))
                kind = ("down" if state.startswith("DOWN") else "drained" if "DRAIN" in state
                        else "allocated" if share >= 1 - 1e-9 else "shared" if share > 0 else "idle")
                totals["allocated" if kind == "shared" else kind] = totals.get(
                    "allocated" if kind == "shared" else kind, 0.0) + (share if kind == "shared" else 1.0)
                if kind == "shared":
                    totals["idle"] += 1.0 - share
                who = "".join(f'<li data-job="{j.id}"><b>{j.id}</b> {e(j.user)} <span class="acct">{e(j.account)}</span>'
                              f'{"" if what == "card" else f"<span class=what>{e(what)}</span>"}</li>'
                              for j, _s, what in holders)
                mig = f'<span class="mig">MIG {len(card.mig)}</span>' if card.mig else (
                    f'<span class="mig">{card.shards} shards</span>' if card.shards else "")
                cards.append(f'<div class="card {kind}" data-node="{e(n.name)}" data-card="{card.index}" '
                             f'data-state="{kind}" data-share="{share:.4f}"><div class="ct">GPU {card.index} '
                             f'<span class="type">{e(card.type)}</span> {mig}</div>'
                             f'<ul>{who or "<li class=idle>" + e(kind) + "</li>"}</ul></div>')
            why = views.get(n.name, {}).get("reason") or n.reason
            reason = f' <span class="reason">{e(why)}</span>' if why else ""
            out.append(f'<section class="node {e(state.split("+")[0].lower())}" data-node="{e(n.name)}">'
                       f'<h2>{e(n.name)} <span class="state">{e(state)}</span>{reason}</h2>'
                       f'<div class="cards">{"".join(cards) or "<p class=muted>no GPUs</p>"}</div></section>')
        out.append("</div>")
        summary = " · ".join(f'<span data-total="{k}">{_num(round(v, 2))}</span> {k}' for k, v in totals.items())
        return (f'<h1>Cluster</h1><p class="summary">GPUs: {summary}; <span data-total="running">{len(running)}'
                f'</span> jobs running</p>' + "".join(out))

    def queues(self, caller: Caller) -> str:
        store, cfg = self.service.store, self.service.cfg
        nodes = store.list_nodes()
        running = store.list_jobs(states=["RUNNING"])
        inv = node_inventories(nodes, int(getattr(cfg, "shard_per_gpu", 0) or 0))
        fair = self.service.last_decisions().get("fair_share") or {}
        acc = account_gpus(store.list_accounts(), running, fair, inv)
        rows: dict[tuple[str, str], dict[str, float]] = {}
        for (account, res, kind), v in acc.items():
            rows.setdefault((account, res), {})[kind] = v
        pending: dict[str, int] = {}
        for state, account, _p, _r, n in store.job_counts():
            if state == "PENDING":
                pending[account] = pending.get(account, 0) + n
        kinds = ("quota", "limit", "allocated", "borrowed", "lent", "fair_share")
        body = []
        for (account, res), vals in sorted(rows.items()):
            if account == "root" or (res != "gres/gpu" and not any(vals.get(k, 0.0) > 0 for k in kinds)):
                continue  # a card type's row only where it has a quota or a use
            cells = "".join(
                f'<td class="n" data-kind="{k}">{"—" if k in ("quota", "limit") and vals.get(k, -1) < 0 else _num(vals.get(k, 0.0))}</td>'
                for k in kinds)
            body.append(f'<tr data-account="{e(account)}" data-resource="{e(res)}"><td>{e(account)}</td>'
                        f'<td>{e(res)}</td>{cells}<td class="n">{pending.get(account, 0) if res == "gres/gpu" else ""}</td></tr>')
        head = "".join(f"<th>{h}</th>" for h in ("Account", "Resource", "Quota", "Limit", "Allocated", "Borrowed",
                                                 "Lent", "Fair share", "Pending jobs"))
        share_rows = self._share_rows()
        return (f'<h1>Queues</h1><p class="small">GPUs as the scheduler sees them now: allocated above quota is '
                f'borrowed; idle quota others use is lent; fair share is the last cycle\'s deserved share. '
                f'MIG instances and shards count their share of a card.</p>'
                f'<table class="queues"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
                f'<h2>Fair-share (sshare)</h2>{share_rows}')

    def _share_rows(self) -> str:
        from batchd.priority import share_rows
        try:
            rows = share_rows(self.service.snapshot(), None)
        except BatchdError:
            return '<p class="muted">no snapshot</p>'
        body = []
        for r in rows:
            if r.user is not None:
                continue
            body.append(f'<tr data-share-account="{e(r.account)}"><td>{"&nbsp;" * 2 * r.depth}{e(r.account)}</td>'
                        f'<td class="n">{e(r.raw_shares)}</td><td class="n" data-kind="norm_shares">{r.norm_shares:f}</td>'
                        f'<td class="n">{int(r.raw_usage)}</td><td class="n">{r.effectv_usage:f}</td></tr>')
        return ('<table class="shares"><thead><tr><th>Account</th><th>RawShares</th><th>NormShares</th>'
                f'<th>RawUsage</th><th>EffectvUsage</th></tr></thead><tbody>{"".join(body)}</tbody></table>')

    def pending(self, caller: Caller) -> str:
        from batchd.server.explain import reason_text
        jobs = self.call(caller, "/v1/jobs?" + urlencode({"states": "PENDING", "fold": "1"}))["jobs"]
        body = []
        for j in jobs[:MAX_ROWS]:
            body.append(f'<tr data-job="{e(j["display_id"])}"><td>{e(j["display_id"])}</td><td>{e(j["user"])}</td>'
                        f'<td>{e(j["account"])}</td><td>{e(j["partition"])}</td><td>{e(j.get("tres_per_node") or j.get("tres_per_job") or "")}</td>'
                        f'<td>{e(j["priority"])}</td><td class="reason">{e(j["reason"])}</td>'
                        f'<td class="why">{e(reason_text(j["reason"]))}</td></tr>')
        more = f'<p class="small">{len(jobs) - MAX_ROWS} more not shown</p>' if len(jobs) > MAX_ROWS else ""
        return (f'<h1>Pending <span class="count">{len(jobs)}</span></h1>'
                '<table class="pending"><thead><tr><th>Job</th><th>User</th><th>Account</th><th>Partition</th>'
                '<th>GPUs</th><th>Priority</th><th>Reason</th><th>Why</th></tr></thead>'
                f'<tbody>{"".join(body)}</tbody></table>{more}')

    def my_jobs(self, caller: Caller) -> str:
        me = user_name(caller.uid)
        jobs = self.call(caller, "/v1/jobs?" + urlencode({"users": me, "all": "1", "fold": "1"}))["jobs"]
        out = [f'<h1>Jobs of {e(me)} <span class="count">{len(jobs)}</span></h1>']
        for j in jobs[:50]:
            tail = _tail(j.get("stdout"), int(j.get("uid", -1))) if j["state"] != "PENDING" else ""
            out.append(f'<article class="job" data-job="{e(j["display_id"])}"><h3>{e(j["display_id"])} '
                       f'{e(j["name"])} <span class="state {e(j["state"].lower())}">{e(j["state"])}</span> '
                       f'<span class="muted">{e(j["account"])} · {e(j["partition"])} · {e(j.get("node_list") or j["reason"])}'
                       f'</span></h3>{f"<pre>{e(tail)}</pre>" if tail else ""}</article>')
        return "".join(out)

    def bill(self, caller: Caller) -> str:
        rep = self.call(caller, "/v1/report")
        cur = rep.get("currency") or ""
        body = []
        for r in rep["rows"]:
            cost = r.get("cost")
            body.append(f'<tr data-account="{e(r.get("account"))}"><td>{e(r.get("account"))}</td>'
                        f'<td class="n" data-kind="gpu_hours">{float(r.get("gpu_hours") or 0):.2f}</td>'
                        f'<td class="n" data-kind="cost">{e(cost if cost is not None else "—")}</td></tr>')
        return (f'<h1>Bill, this month</h1><table class="bill"><thead><tr><th>Account</th><th>GPU-hours</th>'
                f'<th>Cost {e(cur)}</th></tr></thead><tbody>{"".join(body)}</tbody></table>'
                '<iframe class="report" src="/ui/bill.html" title="the report"></iframe>')

    def bill_report(self, caller: Caller) -> str:
        from batchd.accounting.html import render_html
        return render_html(self.call(caller, "/v1/report?" + urlencode({"daily": "1", "by_user": "1"})))


def _tail(path: str | None, uid: int) -> str:
    """The last lines of a job's output file, only if it is a regular file of the job's
    own user (the daemon reads as root: a job naming /etc/shadow as its output must not
    make the dashboard show it)."""
    if not path:
        return ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return ""
        os.lseek(fd, max(0, st.st_size - TAIL_BYTES), os.SEEK_SET)
        data = os.read(fd, TAIL_BYTES)
    finally:
        os.close(fd)
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-TAIL_LINES:])


def _cookie(header: str | None, name: str) -> str | None:
    for part in (header or "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == name and v:
            return v
    return None


def _redirect(to: str, headers: dict[str, str] | None = None) -> WebReply:
    return WebReply(303, b"", "text/plain", {"Location": to, **(headers or {})})


def _stamp() -> str:
    return f'<p class="stamp">updated {time.strftime("%H:%M:%S")}</p>'


def _html_page(title: str, body: str, scripts: str) -> str:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{e(title)} · batchd</title><link rel="stylesheet" href="/ui/static/dash.css"></head>'
            f'<body>{body}{scripts}</body></html>')


__all__ = ["Dashboard"]
