"""The HTML bill (`batchd report --html`): a crafted running month opens in headless
Chromium, its screenshot shows every account's colour and the quota bars, and the page
Chromium loaded says what a finance reader needs (the period in words, the rate card,
every day of the month on the chart's axis, round y-axis ticks, users per account,
"not measured"); hand-made report objects check the rest with html.parser. The
Chromium test is skipped where no `chromium` is installed (.ci/run installs Debian's)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from typing import Any

import billmonth
import pytest
from acct_helpers import ts

from batchd.accounting.billtime import period_words
from batchd.accounting.html import PALETTE, render_html
from batchd.accounting.htmlcharts import ELAPSED_FILL, nice_ticks

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "source", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs, self.children = tag, attrs, []  # type: ignore[var-annotated]

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def all(self, tag: str, cls: str | None = None) -> list[Node]:
        out = []
        for c in self.children:
            if isinstance(c, Node):
                if c.tag == tag and (cls is None or cls in c.attrs.get("class", "").split()):
                    out.append(c)
                out += c.all(tag, cls)
        return out

    def by_id(self, ident: str) -> Node:
        return next(n for n in self.all_nodes() if n.attrs.get("id") == ident)

    def all_nodes(self) -> list[Node]:
        out = []
        for c in self.children:
            if isinstance(c, Node):
                out += [c, *c.all_nodes()]
        return out


class Tree(HTMLParser):
    """A DOM of the page, strict enough to fail on a tag closed out of order."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]
        self.feed(text)
        self.close()
        assert self.stack == [self.root], [n.tag for n in self.stack]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def rows_of(table: Node) -> list[list[str]]:
    return [[c.text.strip() for c in tr.children if isinstance(c, Node)] for tr in table.all("tr")]


def section(doc: Node, title: str) -> Node:
    return next(s for s in doc.all("section") if any(h.text == title for h in s.all("h2")))


def read_png(path: str) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) -> (width, bytes per pixel, rows)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and ctype in (2, 6)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, bpp, rows


def _count(png: tuple[int, int, list[bytes]], hex_color: str) -> int:
    w, bpp, rows = png
    rgb = bytes.fromhex(hex_color[1:])
    return sum(1 for r in rows for x in range(w) if r[x * bpp:x * bpp + 3] == rgb)


def _is_round(v: float) -> bool:
    """1, 2, 2.5 or 5 times a power of ten."""
    mant = v / 10 ** int(f"{v:e}".split("e")[1])
    return any(abs(mant - m) < 1e-9 for m in (1, 2, 2.5, 5))


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no chromium (apt-get install -y chromium)")
def test_bill_of_a_running_month_in_chromium(store, tmp_path):
    billmonth.build(store)
    rep = billmonth.report(store)
    page = tmp_path / "bill.html"
    page.write_text(render_html(rep, issued=billmonth.NOW + 60), encoding="utf-8")
    shot = tmp_path / "bill.png"
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--proxy-server=127.0.0.1:9"]  # nothing may load from the network
    proc = subprocess.run([*base, "--force-device-scale-factor=1", f"--screenshot={shot}",
                           "--window-size=1200,3400", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    if os.environ.get("BATCHD_BILL_SCREENSHOT"):  # keep the picture to look at
        shutil.copy(shot, os.environ["BATCHD_BILL_SCREENSHOT"])
    png = read_png(str(shot))
    assert png[0] == 1200
    for i in range(3):  # each account's colour (sorted by name) in the charts and legends
        assert _count(png, PALETTE[i]) > 2000, f"no bars of colour {PALETTE[i]}"
    assert _count(png, ELAPSED_FILL) > 2000  # the quota to date, in the quota chart

    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    doc = Tree(dom).root
    # the title: the cluster and the period in words; the issue date; the currency
    assert doc.all("h1")[0].text == "December 2026, month to date as of 18 December 14:30 UTC"
    assert "cluster dev16" in doc.all("p", "kicker")[0].text
    meta = doc.all("dl", "meta")[0].text
    assert "Issued18 December 2026, 14:31 UTC" in meta and "CurrencyEUR" in meta
    # the rate card: every price with its unit, currency, validity and the days it priced
    card = rows_of(section(doc, "Rate card").all("table")[0])
    assert card[1:] == [["cpu", "0.01 per CPU-hour", "EUR", "2026-01-01", "open-ended",
                         "1 December 2026 00:00 – 18 December 2026 14:30 UTC"],
                        ["gres/gpu:h200", "2.00 per GPU-hour", "EUR", "2026-01-01", "open-ended", "1–9 December 2026"],
                        ["gres/gpu:h200", "2.40 per GPU-hour", "EUR", "2026-12-10", "open-ended",
                         "10 December 2026 00:00 – 18 December 2026 14:30 UTC"]]
    # the daily chart: every day of the month on the axis, the days after now hatched
    daily = doc.by_id("daily")
    assert [t.text for t in daily.all("text", "day")] == [str(d) for d in range(1, 32)]
    assert len(daily.all("rect", "notyet")) == 1
    assert len(daily.all("rect", "bar")) == 3 * 16 - 1 + 2  # 16 days x 3 accounts, speech not on the 13th; the 18th
    totals = [float(t.text) for t in daily.all("text", "daytotal")]
    assert len(totals) == 18 and totals[4] == 0 and max(totals) == 118  # the 5th without use; day 18 partial
    ticks = [float(t.text.replace(",", "")) for t in daily.all("text", "ytick")]
    assert ticks[0] == 0 and len(ticks) >= 4 and ticks[-1] >= max(totals) and ticks[-1] > 1
    step = ticks[1] - ticks[0]
    assert _is_round(step) and ticks == pytest.approx([i * step for i in range(len(ticks))])
    assert len(daily.all("line", "grid")) == len(ticks)
    # the chart's numbers, on paper: a line per counted day, then the rest not yet counted
    table = rows_of(doc.all("table", "daily")[0])
    assert table[0] == ["Day", "nlp", "speech", "vision", "Total"]
    assert table[5] == ["Sat 5 December", "0.00", "0.00", "0.00", "0.00"]
    assert table[18][0] == "Fri 18 December (to 14:30 UTC)"
    assert table[19] == ["19–31 December", "not yet counted"]
    assert table[20] == ["Period", "396.00", "154.00", "1,202.00", "1,752.00"]
    # the bill: efficiency "not measured" where no GPU time was measured; totals; reconciliation
    bill = rows_of(section(doc, "Bill by account").all("table")[0])
    assert bill[2] == ["speech", "154.00", "1,232.00", "154.00", "347.52", "not measured"]
    assert bill[-1][:5] == ["TOTAL", "1,752.00", "14,016.00", "652.50", "4,003.36"]
    summary = section(doc, "Summary").text
    assert "Total cost to date4,003.36 EUR" in summary
    assert "Reconciled to the cent: sum over accounts 4,003.36 EUR = sum over jobs 4,003.36 EUR" in summary
    assert "5,008.00 GPU-hours, worth 10,978.40 EUR" in summary
    # quota against the whole month's quota, the elapsed part marked, borrowing and lending
    quota = section(doc, "Quota and use")
    assert len(quota.all("rect", "quota")) == len(quota.all("rect", "elapsed")) == 3
    assert len(quota.all("rect", "borrowed")) == 1
    # vision's 2 borrowed cards come from the 4 no account is guaranteed (16 - 6 - 4 - 2): nobody lends
    assert rows_of(quota.all("table")[0])[3] == ["vision", "4,464.00", "2,535.00", "1,202.00", "47.4%", "128.00",
                                                 "0.00"]
    # the users of each account
    users = section(doc, "Users of each account")
    assert [h.text for h in users.all("h3")] == ["nlp", "speech", "vision"]
    vision = rows_of(users.all("table")[2])
    assert [r[0] for r in vision] == ["User", "alice", "carol", "vision total"]
    assert vision[-1][4] == "2,750.56"
    assert rows_of(users.all("table")[1])[1][-1] == "not measured"


def _rep(**kw: Any) -> dict[str, Any]:
    """A small hand-made report object (the shape of build_report's, daily included)."""
    rep: dict[str, Any] = {
        "period": {"start": ts("2026-11-01"), "end": ts("2026-12-01"), "upto": ts("2026-12-01")},
        "currency": "EUR", "group_by": ["account"], "cluster": "dev16",
        "rate_card": [{"tres": "gres/gpu", "per_hour": "1.20", "currency": "EUR", "valid_from": ts("2026-01-01"),
                       "valid_to": ts("2027-01-01"), "applied_from": ts("2026-11-01"), "applied_to": ts("2026-12-01")}],
        "rows": [{"account": "vision", "gpu_hours": 1500.0, "gpu_hours_by_type": {"h200": 1500.0}, "cpu_hours": 10.0,
                  "billing": 5.0, "cost": "1800.00", "quota_gpu_hours": 1440.0, "quota_used_pct": 104.17,
                  "borrowed_gpu_hours": 60.0, "gpu_efficiency_pct": None}],
        "idle_gpu_hours": 10.0, "idle_cost": "12.00", "capacity_gpu_hours": 1510.0,
        "totals": {"gpu_hours": 1500.0, "cpu_hours": 10.0, "billing": 5.0, "cost": "1800.00"},
        "jobs_cost": "1800.00", "reconciled": True, "running_included": 0, "flags": [],
        "daily": {"2026-11-02": {"vision": 700.0}, "2026-11-30": {"vision": 800.0}},
    }
    rep.update(kw)
    return rep


def test_a_whole_past_month_has_every_day_and_nothing_hatched():
    doc = Tree(render_html(_rep(), issued=ts("2026-12-02T08:00"))).root
    assert doc.all("h1")[0].text == "November 2026"
    assert "Total cost1,800.00 EUR" in section(doc, "Summary").text
    assert doc.all("title")[0].text == "dev16 GPU bill, November 2026"
    daily = doc.by_id("daily")
    assert [t.text for t in daily.all("text", "day")] == [str(d) for d in range(1, 31)]
    assert not daily.all("rect", "notyet") and "not yet counted" not in doc.text
    ticks = [float(t.text.replace(",", "")) for t in daily.all("text", "ytick")]
    assert ticks == [0, 200, 400, 600, 800]
    # quota over the whole (elapsed) period; lending not reported yet: a dash
    quota = rows_of(section(doc, "Quota and use").all("table")[0])
    assert quota[1] == ["vision", "1,440.00", "1,440.00", "1,500.00", "104.2%", "60.00", "–"]
    assert "not measured" in rows_of(section(doc, "Bill by account").all("table")[0])[1]


@pytest.mark.parametrize(("period", "words"), [
    ({"start": ts("2026-12-01"), "end": ts("2026-12-16"), "upto": ts("2026-12-16")}, "1–15 December 2026"),
    ({"start": ts("2026-12-01"), "end": ts("2026-12-01T18:52"), "upto": ts("2026-12-01T18:52")},
     "December 2026, month to date as of 1 December 18:52 UTC"),  # --end now
    ({"start": ts("2026-12-01"), "end": ts("2026-12-01T18:00"), "upto": ts("2026-12-01T18:00")},
     "1 December 2026, 00:00–18:00 UTC"),
    ({"start": ts("2026-12-03"), "end": ts("2026-12-16"), "upto": ts("2026-12-10T04:00")},
     "3–15 December 2026, counted up to 10 December 04:00 UTC"),
    ({"start": ts("2026-11-20"), "end": ts("2027-01-06"), "upto": ts("2027-01-06")},
     "20 November 2026 – 5 January 2027"),
    ({"start": ts("2026-10-01"), "end": ts("2026-12-01"), "upto": ts("2026-12-01")}, "1 October – 30 November 2026"),
    ({"start": ts("2026-11-30T23:00"), "end": ts("2026-12-01T00:00"), "upto": ts("2026-12-01"), "tz": "Europe/Berlin"},
     "1 December 2026, 00:00–01:00 Europe/Berlin"),
    ({"start": ts("2026-11-01"), "end": ts("2026-12-01"), "upto": ts("2026-12-01"), "tz": "Mars/Olympus"},
     "November 2026"),  # a zone this machine does not know: UTC
], ids=["range", "end-now", "hours", "counted-up-to", "two-years", "two-months", "zone", "unknown-zone"])
def test_the_period_in_words(period, words):
    assert period_words({"period": period}) == words


def test_a_month_to_now_spans_the_whole_month_and_quota():
    now = ts("2026-11-16T11:30")  # `--end now`: an end not on a whole hour
    rep = _rep(period={"start": ts("2026-11-01"), "end": now, "upto": now})
    doc = Tree(render_html(rep)).root
    assert len(doc.by_id("daily").all("text", "day")) == 30
    assert len(doc.by_id("daily").all("rect", "notyet")) == 1
    # 1,440 GPU-h to date is 15 days 11:30 of 30: the whole month's quota is 2,790.85
    assert rows_of(section(doc, "Quota and use").all("table")[0])[1][1:3] == ["2,790.85", "1,440.00"]


@pytest.mark.parametrize(("peak", "want"), [
    (0.0, [0.0, 1.0]), (0.37, [0, 0.1, 0.2, 0.3, 0.4]), (1.0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    (118.0, [0, 25, 50, 75, 100, 125]), (1752.0, [0, 500, 1000, 1500, 2000]), (9.0, [0, 2, 4, 6, 8, 10]),
])
def test_y_axis_ticks_are_round(peak, want):
    assert nice_ticks(peak) == pytest.approx(want)


def test_optional_fields_users_and_escaping():
    """Fields other engineers add (lent_gpu_hours, account_share_pct, down_gpu_hours,
    period.tz) show where present; every text is escaped; nothing loads from outside."""
    evil = '<script>alert("x")</script>'
    rep = _rep(down_gpu_hours=48.0)
    rep["period"]["tz"] = "Europe/Berlin"
    rep["rows"][0].update(account=evil, lent_gpu_hours=12.5)
    rep["user_rows"] = [
        {"account": evil, "user": "bob&co", "gpu_hours": 1000.0, "cpu_hours": 5.0, "billing": 2.5,
         "cost": "1200.01", "gpu_efficiency_pct": 50.0, "account_share_pct": 66.67},
        {"account": evil, "user": "eve", "gpu_hours": 500.0, "cpu_hours": 5.0, "billing": 2.5,
         "cost": "600.00", "gpu_efficiency_pct": None}]
    rep["daily"] = {"2026-11-02": {evil: 700.0}}
    text = render_html(rep, issued=ts("2026-12-02T08:00"))
    assert "<script" not in text and "&lt;script&gt;" in text and "bob&amp;co" in text
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\")", text) and "@import" not in text
    doc = Tree(text).root
    assert rows_of(section(doc, "Quota and use").all("table")[0])[1][-1] == "12.50"
    assert "48.00 GPU-hours on nodes that were down or drained" in section(doc, "Summary").text
    assert "Europe/Berlin" in doc.all("dl", "meta")[0].text
    users = rows_of(section(doc, "Users of each account").all("table")[0])
    assert users[0] == ["User", "GPU-h", "CPU-h", "Billing-h", "Cost EUR", "Share of account", "GPU efficiency"]
    assert users[1][5] == "66.7%" and users[2][5] == "–" and users[2][6] == "not measured"
    # each user's cost rounded on its own: the page says how they add up
    assert "they add up to 1,800.01 EUR; the account is billed 1,800.00 EUR" in doc.text


def test_gpu_hour_budgets_show_with_their_use():
    rep = _rep()
    assert "GPU-hour budgets" not in render_html(rep)  # no budget, no section
    rep["budgets"] = [
        {"account": "nlp", "tres": "gres/gpu", "period": "month", "period_start": 0, "limit_minutes": 120000.0,
         "used_minutes": 30000.0, "used_pct": 25.0, "exhausted": False},
        {"account": "vision", "tres": "gres/gpu", "period": "week", "period_start": 0, "limit_minutes": 600.0,
         "used_minutes": 660.0, "used_pct": 110.0, "exhausted": True}]
    rows = rows_of(section(Tree(render_html(rep)).root, "GPU-hour budgets").all("table")[0])
    assert rows == [["Account", "TRES", "Period", "Used (hours)", "Budget (hours)", "Used"],
                    ["nlp", "gres/gpu", "month", "500.0", "2,000.0", "25.0%"],
                    ["vision", "gres/gpu", "week", "11.0", "10.0", "used up: new jobs wait"]]


def test_a_bill_that_does_not_reconcile_says_so():
    doc = Tree(render_html(_rep(reconciled=False, jobs_cost="1800.02"))).root
    assert "NOT RECONCILED: sum over accounts 1,800.00 EUR ≠ sum over jobs 1,800.02 EUR" in section(doc, "Summary").text


def test_a_long_period_names_months_and_totals_by_month():
    rep = _rep(period={"start": ts("2026-01-01"), "end": ts("2027-01-01"), "upto": ts("2027-01-01")})
    doc = Tree(render_html(rep)).root
    assert doc.all("h1")[0].text == "1 January – 31 December 2026"
    daily = doc.by_id("daily")
    assert not daily.all("text", "day") and not daily.all("text", "daytotal")  # no room: the months are named
    months = [t.text for t in daily.all("text", "month")]
    assert months[0] == "Jan 2026" and months[-1] == "Dec" and len(months) >= 10
    table = rows_of(doc.all("table", "daily")[0])
    assert table[0][0] == "Month" and len(table) == 1 + 12 + 1
    assert table[11] == ["November 2026", "1,500.00", "1,500.00"] and table[-1][-1] == "1,500.00"


def test_an_empty_report_without_cluster_or_prices():
    rep = _rep(rows=[], daily={}, rate_card=[], currency="", totals={"gpu_hours": 0.0, "cpu_hours": 0.0,
                                                                     "billing": 0.0, "cost": "0.00"})
    del rep["cluster"]
    doc = Tree(render_html(rep)).root
    assert doc.all("p", "kicker")[0].text == "GPU usage bill"
    assert "No prices in force in the period: nothing is charged." in section(doc, "Rate card").text
    assert "Costs in" not in doc.text and "Quota and use" not in doc.text
    assert [float(t.text) for t in doc.by_id("daily").all("text", "ytick")] == [0, 1]
