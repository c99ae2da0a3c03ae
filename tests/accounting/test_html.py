"""The HTML report opens in headless Chromium and its charts render: a screenshot shows
the bar colours of every account in the daily chart and the quota-vs-use bars.
Skipped when /usr/bin/chromium is missing (.ci/run installs Debian's `chromium`)."""

from __future__ import annotations

import os
import struct
import subprocess
import zlib

import pytest
from acct_helpers import add_account, add_node, insert_usage, ts, usage

from batchd.accounting.html import PALETTE, render_html
from batchd.accounting.prices import make_price
from batchd.accounting.report import build_report
from batchd.accounting.rollup import run_rollup
from batchd.store import accounting as sql

CHROMIUM = "/usr/bin/chromium"


def read_png(path: str) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) -> (width, height, rows of RGB(A))."""
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


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no /usr/bin/chromium (apt-get install -y chromium)")
def test_html_report_renders_its_charts_in_chromium(store, tmp_path):
    add_node(store, "gpu01", 8)
    accounts = ["vision", "nlp", "speech"]
    for i, a in enumerate(accounts):
        add_account(store, a, 2 + i)
    sql.add_prices(store, [make_price("gres/gpu:h200", "2.00", "EUR", "2026-01-01")])
    recs = [usage(ts(f"2026-10-{d:02d}T{2 * i:02d}:00"), ts(f"2026-10-{d:02d}T{2 * i + 6:02d}:00"), account=a,
                  tres={"gres/gpu": 1 + i, "gres/gpu:h200": 1 + i})
            for d in range(1, 11) for i, a in enumerate(accounts)]
    insert_usage(store, recs)
    run_rollup(store, 0)
    rep = build_report(store, start=int(ts("2026-10-01")), end=int(ts("2026-10-11")), now=ts("2027-01-01"),
                       daily=True)
    page = tmp_path / "report.html"
    page.write_text(render_html(rep), encoding="utf-8")
    shot = tmp_path / "shot.png"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--force-device-scale-factor=1", f"--screenshot={shot}", "--window-size=1000,1400",
                           "--proxy-server=127.0.0.1:9", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    png = read_png(str(shot))
    # each account's colour in the stacked daily chart (accounts are sorted by name)
    for i, _ in enumerate(sorted(accounts)):
        assert _count(png, PALETTE[i]) > 500, f"no bars of colour {PALETTE[i]}"
    # quota bars (grey) in the quota-vs-use chart
    assert _count(png, "#bab0ac") > 500
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert dom.count('class="bar"') == 30 and dom.count('class="quota"') == 3
