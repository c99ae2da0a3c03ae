"""The dashboard's stylesheet and script (batchd.server.dashboard), served from here: no
build step, no library, nothing from the network. The script swaps in the page's
`?fragment=1` every REFRESH seconds (and at once when the tab comes back into view); a
reply that is not the page (the token expired: the login form) sends the browser to it."""

REFRESH_S = 10

CSS = """
:root{color-scheme:light;--ok:#1a7a3a;--bad:#b3261e;--warn:#a15c00;--line:#d8d8d8;--muted:#6b6b6b}
*{box-sizing:border-box}
body{font-family:system-ui,"DejaVu Sans",sans-serif;margin:0;color:#1d1d1d;font-size:14px;line-height:1.4;background:#fafafa}
header{display:flex;flex-wrap:wrap;align-items:center;gap:8px 20px;padding:8px 16px;background:#1f3a5f;color:#fff}
header a{color:#fff;text-decoration:none;padding:4px 8px;border-radius:4px}header a.here,header a:hover{background:#375a88}
.brand{font-weight:bold;font-size:16px}.who{margin-left:auto;font-size:13px}
main{padding:12px 16px;max-width:2400px;margin:0 auto}
h1{font-size:22px;margin:4px 0 10px}h2{font-size:16px;margin:0 0 6px}h3{font-size:14px;margin:0 0 4px}
.count{color:var(--muted);font-weight:normal}.small{font-size:12px;color:#444}.muted{color:var(--muted)}
.summary{font-size:15px}.stamp{color:var(--muted);font-size:11px;text-align:right}
.error{color:var(--bad);font-weight:bold}
.nodes{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:12px}
.node{background:#fff;border:1px solid var(--line);border-radius:6px;padding:8px 10px}
.node.down{border-color:var(--bad)}.node.drain,.node.drained{border-color:var(--warn)}
.state{font-size:12px;font-weight:normal;color:var(--muted)}.reason{font-size:12px;color:var(--warn)}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(120px,1fr));gap:6px}
.card{border:1px solid var(--line);border-radius:4px;padding:4px 6px;font-size:12px;min-height:64px}
.card.allocated{background:#dcefe2;border-color:#8cc29d}.card.shared{background:#eef6e6;border-color:#b7d59b}
.card.idle{background:#fff}.card.down{background:#f8dcdc}.card.drained{background:#fbeed5}
.card ul{list-style:none;margin:2px 0 0;padding:0}.card li{overflow-wrap:anywhere;margin-top:2px}
.card li .what{display:block;color:#444}
.ct{font-weight:bold}.type,.mig{font-weight:normal;color:var(--muted)}.acct{color:#375a88}
table{border-collapse:collapse;background:#fff;margin:4px 0 14px;font-size:13px}
th,td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:left}th{background:#eef1f5}
td.n{text-align:right;font-variant-numeric:tabular-nums}td.why{color:#444;max-width:520px}
article.job{background:#fff;border:1px solid var(--line);border-radius:6px;padding:6px 10px;margin:0 0 8px}
article pre{background:#f4f4f4;padding:6px;margin:4px 0 0;max-height:220px;overflow:auto;font-size:12px}
.state.running{color:var(--ok)}.state.failed,.state.timeout,.state.cancelled{color:var(--bad)}
iframe.report{width:100%;height:1400px;border:1px solid var(--line);background:#fff}
.login{max-width:560px;margin:60px auto;background:#fff;padding:20px;border:1px solid var(--line);border-radius:6px}
.login textarea{width:100%;font-family:monospace}.login button{margin-top:8px;padding:6px 16px}
@media (min-width:2000px){body{zoom:1.6}main{max-width:none}}
"""

JS = """(function () {
  "use strict";
  var main = document.getElementById("live");
  if (!main) { return; }
  function refresh() {
    var url = window.location.pathname + "?fragment=1";
    fetch(url, {credentials: "same-origin", cache: "no-store", redirect: "follow"}).then(function (r) {
      if (r.redirected || !r.ok) { window.location.href = "/ui/login"; return null; }
      return r.text();
    }).then(function (text) {
      if (text !== null && text !== undefined) { main.innerHTML = text; }
    }).catch(function () { /* the daemon restarting: the next tick tries again */ });
  }
  setInterval(function () { if (!document.hidden) { refresh(); } }, REFRESH_MS);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) { refresh(); } });
})();
""".replace("REFRESH_MS", str(REFRESH_S * 1000))
