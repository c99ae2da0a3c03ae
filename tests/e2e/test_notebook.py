"""The notebook recipe (issue 19, item 7: docs/notebooks.md): examples/notebook/submit.sh
starts a web app on an allocated GPU as a batch job and prints the one line to reach it;
the same app.sh runs in the foreground under `srun --pty`. A small HTTP server stands in
for JupyterLab, and the page is fetched at the address the line gives."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.harness import BIN
from tests.ptydriver import PtyDriver

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "notebook"
#: the stand-in for JupyterLab: serves the job's working directory
APP = "python3 -u -m http.server {port} --bind 0.0.0.0"
LINE = (r"notebook: job (\d+) on (\S+):(\d+) \(GPUs ([\d,]+)\); reach it with: ssh -N -L (\d+):(\S+):(\d+) "
        r"\S+@(\S+), then open http://localhost:(\d+)/ \(on the cluster network: (http://\S+)\)")


def _fetch(url: str) -> str:
    deadline = time.time() + 20
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read().decode()
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def test_the_batch_recipe_prints_the_line_and_the_app_answers_there(cluster):
    (cluster.root / "index.html").write_text("<h1>hello from the notebook</h1>\n")
    env = dict(cluster.env, NOTEBOOK_APP=APP)
    r = subprocess.run([str(EXAMPLES / "submit.sh"), "--gres=gpu:h200:1", "-t", "10"], env=env, cwd=cluster.root,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(LINE + "\n", r.stdout)
    assert m, r.stdout
    job_id, host, port = int(m.group(1)), m.group(2), m.group(3)
    assert m.group(4) == "0" and m.group(5) == port == m.group(7) == m.group(9) and m.group(6) == host
    assert _fetch(m.group(10)) == "<h1>hello from the notebook</h1>\n"
    assert cluster.job(job_id)["state"] == "RUNNING" and cluster.job(job_id)["name"] == "notebook"
    cluster.run("scancel", str(job_id))
    assert cluster.wait(job_id, ("CANCELLED",))["state"] == "CANCELLED"


def test_the_same_app_in_the_foreground_under_srun_pty(cluster):
    (cluster.root / "index.html").write_text("<p>pty notebook</p>\n")
    env = dict(cluster.env, NOTEBOOK_APP=APP, TERM="xterm")
    d = PtyDriver([str(BIN / "srun"), "--gres=gpu:1", "-J", "nb", "--pty", str(EXAMPLES / "app.sh")], env,
                  str(cluster.root))
    try:
        m = re.search(LINE.encode(), d.expect(LINE).group(0))
        assert m
        assert _fetch(m.group(10).decode()) == "<p>pty notebook</p>\n"
        d.expect(r"GET / HTTP")  # the app's log, live on the user's terminal
        d.send(b"\x03")  # Ctrl-C reaches the app (http.server exits 0 on it); so does the job
        assert d.wait(timeout=30) == 0
        assert "Keyboard interrupt received" in d.text()
        job_id = int(m.group(1))
        assert cluster.wait(job_id, ("COMPLETED",))["state"] == "COMPLETED"
    finally:
        d.close()
