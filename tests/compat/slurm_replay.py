"""The project's replay of the recorded Slurm 22.05 cases (tests/data/slurm-reference) against
batchd's own commands.

`Replay` drives the commands of this virtual environment (sbatch, squeue, scontrol, scancel,
sacct) against a running dev daemon of the reference cluster (examples/slurm-reference.toml),
one recorded case after the other, and compares what they print and what the jobs leave behind
with the recording. Every comparison is a `Check` (want: the recording, got: batchd, both
normalised); a case agrees when all its checks do.

A single-job case (`sbatch/NN_*.json`) is judged on: sbatch's exit code, stdout and stderr; the
commands the recorder ran while the job lived (hold/release, requeue); the final state of the
job (or of each array task) and its ExitCode; the names of the files in the submit directory
(and in a `--chdir` target) and each output file's lines, an `env | sort` dump variable by
variable, with no variable that Slurm did not set; the sacct rows, field by field. The
multi-job case (`steps`) replays its commands in order and compares each output row by row.
A bad input (`sbatch_bad/bad_inputs.json`) is judged on sbatch's exit code and message and,
where Slurm accepted it, on the job's settled state and its TimeLimit, TRES and NumCPUs.

What is normalised, and how: slurm_recording.py.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurm_recording import (
    MISSING,
    RECORDED_HOST,
    RECORDED_ROOT,
    RECORDED_USER,
    JobIds,
    Side,
    files_under,
    gpu_list_agrees,
    recorded_span_s,
    scontrol_fields,
    scontrol_records,
    split_output,
    submitted_id,
    table,
)

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE"}
#: pending reasons that do not clear by themselves: a job pending for one has settled
STUCK = {"DependencyNeverSatisfied", "JobHeldUser", "JobHeldAdmin", "PartitionConfig", "AssocGrpGRES",
         "BadConstraints"}
PRESENCE_ONLY = {"PATH", "SLURM_TASK_PID"}
GPU_LISTS = {"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
             "SLURM_JOB_GPUS", "SLURM_STEP_GPUS"}
BATCHD_ADDS = {"CUDA_DEVICE_ORDER"}
#: sacct fields compared (Elapsed, Start and End are clock readings)
SACCT_FIELDS = ("JobName", "Account", "User", "Partition", "QOS", "State", "ExitCode", "Timelimit", "AllocCPUS",
                "ReqMem", "AllocTRES", "ReqTRES", "WorkDir", "Reason")
#: the commands the recorder ran on a single job while it lived, in the recorder's order
LIVE_STEPS = ("squeue_while_held", "scontrol_release", "squeue_pending", "scancel", "scontrol_requeue",
              "squeue_after_requeue", "scontrol_show_after_requeue")
#: differences between the recording and batchd that are known and not yet fixed: (case, check,
#: field) -> (what batchd prints, why). The replay accepts exactly that value, and a check named
#: `known difference ...` fails once batchd prints something else (then drop the entry).
KNOWN_DIFFERENCES: dict[tuple[str, str, str], tuple[str, str]] = {
    ("08_gpus_per_task", "sacct J1", "ReqMem"): (
        "1G", "Slurm prints the job's memory on its node (2 tasks x DefMemPerCPU 1024 = 2G), batchd one task's"),
    ("30_requeue", "sacct J1", "Reason"): (
        "None", "Slurm keeps the pending reason of the requeue hold (BeginTime) in the record of the run after it"),
}


@dataclass
class Check:
    case: str
    name: str
    want: Any
    got: Any

    @property
    def ok(self) -> bool:
        return bool(self.want == self.got)


# --------------------------------------------------------------------------- the replay
class Replay:
    """Replays recorded cases against the daemon at `socket_path`; each case's submit
    directory is made under `root` (the recording's /scratch/golden)."""

    def __init__(self, bin_dir: Path, socket_path: Path, root: Path) -> None:
        self.bin = bin_dir
        self.root = root
        me = pwd.getpwuid(os.getuid())
        self.user = {"user": me.pw_name, "uid": str(me.pw_uid), "gid": str(os.getgid()), "home": me.pw_dir}
        self.host = socket.gethostname().split(".")[0]
        # the recorder's submit environment: a login shell's few variables, no SLURM_* input
        self.env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": me.pw_dir, "LANG": "C.UTF-8",
                    "TERM": "xterm", "TMPDIR": "/tmp", "SHELL": "/bin/bash", "HOSTNAME": self.host,
                    "BATCHD_SOCKET": str(socket_path)}
        self.checks: list[Check] = []
        self.submitted: list[str] = []

    # -- commands
    def sh(self, command: str, cwd: Path | None = None, timeout: float = 120) -> tuple[int, str, str]:
        try:
            p = subprocess.run(["bash", "-c", command], cwd=cwd or self.root, env=self.env, capture_output=True,
                               text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return 124, "", f"<no answer in {timeout} s>"
        return p.returncode, p.stdout, p.stderr

    def sides(self, ids: JobIds) -> tuple[Side, Side]:
        return (Side("want", ids, RECORDED_ROOT, RECORDED_HOST, RECORDED_USER),
                Side("got", ids, str(self.root), self.host, self.user))

    def check(self, case: str, name: str, want: Any, got: Any) -> None:
        for (kcase, kname, field), (printed, why) in KNOWN_DIFFERENCES.items():
            if (kcase, kname) == (case, name) and isinstance(got, dict):
                self.checks.append(Check(case, f"known difference {field} ({why})", printed, got.get(field)))
                if got.get(field) == printed:
                    got = {**got, field: want.get(field)}
        self.checks.append(Check(case, name, want, got))

    def submit(self, command: str, cwd: Path) -> tuple[tuple[int, str, str], str | None]:
        out = self.sh(command, cwd)
        jid = submitted_id(out[1])
        if jid:
            self.submitted.append(jid)
        return out, jid

    def states(self, jid: str) -> list[tuple[str, str]]:
        """(state, reason) of each task of job `jid`: squeue, else sacct once it is gone."""
        rc, out, _ = self.sh(f"squeue -h -t all -j {jid} -o '%T %r'")
        rows = [tuple((ln.split(None, 1) + [""])[:2]) for ln in out.splitlines() if ln.strip()] if rc == 0 else []
        if not rows:
            rc, out, _ = self.sh(f"sacct -n -X -P -j {jid} -o State")
            rows = [(ln.split()[0], "") for ln in out.splitlines() if ln.strip()] if rc == 0 else []
        return rows  # type: ignore[return-value]

    def wait(self, jids: list[str], done: Callable[[str, str], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((st := self.states(j)) and all(done(s, r) for s, r in st) for j in jids):
                return True
            time.sleep(0.3)
        return False

    def wait_idle(self, timeout: float = 60) -> None:
        """Until no job of an earlier case holds the node (GPU indices then compare exactly)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.sh("squeue -h -t RUNNING,COMPLETING,CONFIGURING -o %i")[1].strip():
                return
            time.sleep(0.3)

    def sacct(self, command: str, want_keys: set[str], got_side: Side, timeout: float = 20) -> str:
        """Run sacct until every row the recording has is there with a final job state (the
        records are written as the jobs end)."""
        deadline = time.monotonic() + timeout
        while True:
            rc, out, _ = self.sh(command)
            rows = table(out, "|")
            keys = {got_side.job_id_field(r.get("JobID", "")) for r in rows}
            settled = all(r.get("State", "").split(" ")[0] not in ("PENDING", "RUNNING", "REQUEUED")
                          for r in rows if "." not in r.get("JobID", "."))
            if (rc == 0 and want_keys <= keys and settled) or time.monotonic() > deadline:
                return out
            time.sleep(0.5)

    def cleanup(self) -> None:
        if self.submitted:
            self.sh("scancel " + " ".join(self.submitted) + " >/dev/null 2>&1")

    # -- a single-job case
    def single(self, case: str, rec: dict) -> None:
        ids = JobIds()
        want, got = self.sides(ids)
        cwd = self.root / case
        shutil.rmtree(cwd, ignore_errors=True)
        cwd.mkdir(parents=True)
        script = None
        if rec.get("script") is not None:
            script = rec.get("script_file") or next(
                (n for n, c in (rec.get("files_after_final") or {}).items() if c == rec["script"]), "job.sh")
            (cwd / script).write_text(rec["script"])
        self.wait_idle()
        (rc, out, err), jid = self.submit(rec["command"].replace(RECORDED_ROOT, str(self.root)), cwd)
        r = rec["sbatch"]
        ids.add(submitted_id(r["stdout"]) if r["rc"] == 0 else None, jid)
        self.check(case, "sbatch", (r["rc"], want.text(r["stdout"]), want.text(r["stderr"])),
                   (rc, got.text(out), got.text(err)))
        if not jid:
            return  # the remaining checks are about the job; the one above failed already
        for key in (k for k in LIVE_STEPS if k in rec):
            step = rec[key]
            if key == "scontrol_requeue":
                self.wait([jid], lambda s, _r: s == "RUNNING" or s in FINAL, 30)
            arc, aout, aerr = self.sh(ids.command(step["command"]))
            if key == "scontrol_requeue":
                time.sleep(1)
            if key == "scontrol_show_after_requeue":
                self.check(case, key, scontrol_fields(want, step["stdout"]), scontrol_fields(got, aout))
            else:
                self.check(case, key, (step["rc"], want.text(step["stdout"]), want.text(step["stderr"])),
                           (arc, got.text(aout), got.text(aerr)))
        self.wait([jid], lambda s, _r: s in FINAL, max(30.0, 2 * recorded_span_s(rec) + 30))
        time.sleep(0.3)  # the last output lines of a job that has just ended
        self._final_state(case, rec, jid, want, got)
        self._files(case, rec, cwd, script, want, got)
        self._sacct(case, rec, ids, want, got)

    def _final_state(self, case: str, rec: dict, jid: str, want: Side, got: Side) -> None:
        sacct_rows = [r for r in table((rec.get("sacct_final") or rec.get("sacct") or {}).get("stdout", ""), "|")
                      if "." not in r["JobID"]]
        states = rec.get("final_states") or []
        if not states or not set(states) <= FINAL:  # recorded before the end: what sacct saw last
            states = [r["State"].split(" ")[0] for r in sacct_rows]
        self.check(case, "final states", sorted(states), sorted(s for s, _ in self.states(jid)))
        final = scontrol_records(rec.get("scontrol_show_job_final") or "")
        if final and all(r.get("JobState") in FINAL for r in final):
            codes = [r.get("ExitCode", MISSING) for r in final]
        else:
            codes = [r.get("ExitCode", MISSING) for r in sacct_rows]
        shown = scontrol_records(self.sh(f"scontrol show job {jid}")[1])
        self.check(case, "ExitCode", sorted(codes), sorted(r.get("ExitCode", MISSING) for r in shown))

    def _files(self, case: str, rec: dict, cwd: Path, script: str | None, want: Side, got: Side) -> None:
        recorded = {n: c for n, c in (rec.get("files_after_final") or rec.get("files_after") or {}).items()}
        actual = files_under(cwd)
        for key, files in rec.items():
            if key.startswith("files_in_"):  # a --chdir target beside the submit directory
                label = key[len("files_in_"):]
                recorded.update({f"{label}/{n}": c for n, c in (files or {}).items()})
                actual.update({f"{label}/{n}": c for n, c in files_under(self.root / label).items()})
        self.check(case, "file names", sorted(want.file_name(n) for n in recorded),
                   sorted(got.file_name(n) for n in actual))
        produced = {got.file_name(n): split_output(c) for n, c in actual.items()}
        dumps_want: dict[str, dict[str, str]] = {}
        dumps_got: dict[str, dict[str, str]] = {}
        for name, content in sorted(recorded.items()):
            env, lines = split_output(content)
            key = want.file_name(name)
            if lines and name != script:
                got_lines = produced[key][1] if key in produced else [MISSING]
                self.check(case, f"lines of {key}", [want.cell(x) for x in lines], [got.cell(x) for x in got_lines])
            if env is not None:
                task = env.get("SLURM_ARRAY_TASK_ID", "-")
                dumps_want[task] = {v: want.env(v, x) for v, x in env.items()}
        for env, _ in produced.values():
            if env is not None:
                dumps_got[env.get("SLURM_ARRAY_TASK_ID", "-")] = {v: got.env(v, x) for v, x in env.items()}
        if not dumps_want:
            return
        names = sorted(set().union(*dumps_want.values()))
        for var in names:
            w = {t: d.get(var, MISSING) for t, d in dumps_want.items()}
            g = {t: dumps_got.get(t, {}).get(var, MISSING) for t in dumps_want}
            if var in PRESENCE_ONLY:
                w, g = {t: v != MISSING for t, v in w.items()}, {t: v != MISSING for t, v in g.items()}
            elif var in GPU_LISTS and all(gpu_list_agrees(w[t], g[t]) for t in w):
                g = w
            self.check(case, f"env {var}", w, g)
        extra = set().union(*dumps_got.values()) - set(names) - BATCHD_ADDS if dumps_got else set()
        self.check(case, "env: no variable Slurm did not set", [], sorted(extra))

    def _sacct(self, case: str, rec: dict, ids: JobIds, want: Side, got: Side) -> None:
        recorded = rec.get("sacct_final") or rec.get("sacct")
        if not recorded:
            return
        rows_want = {want.job_id_field(r["JobID"]): r for r in table(recorded["stdout"], "|")}
        out = self.sacct(ids.command(recorded["command"]), set(rows_want), got)
        rows_got = {got.job_id_field(r.get("JobID", "")): r for r in table(out, "|")}
        self.check(case, "sacct rows", sorted(rows_want), sorted(rows_got))
        for key, row in sorted(rows_want.items()):
            fields = [f for f in SACCT_FIELDS if f in row]
            mine = rows_got.get(key, {})
            self.check(case, f"sacct {key}", {f: want.cell(row[f]) for f in fields},
                       {f: got.cell(mine.get(f, MISSING)) for f in fields})

    # -- the multi-job case
    def steps(self, case: str, rec: dict) -> None:
        ids = JobIds()
        want, got = self.sides(ids)
        cwd = Path(rec["cwd"].replace(RECORDED_ROOT, str(self.root)))
        shutil.rmtree(cwd, ignore_errors=True)
        cwd.mkdir(parents=True)
        self.wait_idle()
        jobs: list[str] = []
        looked = 0
        for i, step in enumerate(rec["steps"], 1):
            command = step["command"]
            name = f"step {i:02d} {command.split()[0]}"
            if command.startswith("sbatch"):
                (rc, out, err), jid = self.submit(ids.command(command), cwd)
                ids.add(submitted_id(step["stdout"]), jid)
                jobs += [jid] if jid else []
                self.check(case, name, (step["rc"], want.text(step["stdout"]), want.text(step["stderr"])),
                           (rc, got.text(out), got.text(err)))
                continue
            exe = command.split()[0]
            if looked == 0:
                time.sleep(1)  # the recorder looked first one second after the submissions
            elif exe in ("squeue", "scontrol"):  # later looks: once every job has settled
                self.wait(jobs, lambda s, r: s in FINAL or (s == "PENDING" and r in STUCK), 90)
            elif exe == "sacct":
                time.sleep(1)
            looked += 1
            rc, out, err = self.sh(ids.command(command), cwd)
            if exe in ("squeue", "sacct"):
                sep = "|" if exe == "sacct" else None
                key = "JobID" if exe == "sacct" else "JOBID"
                rows_w = {want.job_id_field(r[key]): r for r in table(step["stdout"], sep)}
                rows_g = {got.job_id_field(r.get(key, "")): r for r in table(out, sep)}
                for jk, row in sorted(rows_w.items()):
                    w = {f: want.cell(v) for f, v in row.items() if f != key}
                    g = {f: got.cell(rows_g.get(jk, {}).get(f, MISSING)) for f in w}
                    if looked == 1 and (w.get("STATE"), w.get("REASON")) == ("PENDING", "None") \
                            and _not_yet_looked_at(g):
                        # caught before the scheduler's first look: any state it may reach agrees
                        g = {**g, "STATE": w["STATE"], "REASON": w["REASON"]}
                    self.check(case, f"{name} {jk}", w, g)
            elif exe == "scontrol" and " show " in f" {command} ":
                self.check(case, name, scontrol_fields(want, step["stdout"]), scontrol_fields(got, out))
            else:
                self.check(case, name, (step["rc"], want.text(step["stdout"]), want.text(step["stderr"])),
                           (rc, got.text(out), got.text(err)))
                if exe == "scancel":
                    time.sleep(1)
        recorded = rec.get("files_after") or {}
        actual = files_under(cwd)
        self.check(case, "file names", sorted(want.file_name(n) for n in recorded),
                   sorted(got.file_name(n) for n in actual))
        produced = {got.file_name(n): split_output(c)[1] for n, c in actual.items()}
        for name, content in sorted(recorded.items()):
            lines = split_output(content)[1]
            if lines:
                key = want.file_name(name)
                self.check(case, f"lines of {key}", [want.cell(x) for x in lines],
                           [got.cell(x) for x in produced.get(key, [MISSING])])

    # -- rejected and dubious submissions
    def bad_inputs(self, data: dict) -> None:
        cwd = self.root / "bad"
        shutil.rmtree(cwd, ignore_errors=True)
        cwd.mkdir(parents=True)
        for name, content in (data.get("files") or {}).items():
            (cwd / name).write_text(content)
        for e in data["results"]:
            case = f"bad:{e['name']}"
            ids = JobIds()
            want, got = self.sides(ids)
            (rc, out, err), jid = self.submit(e["command"], cwd)
            ids.add(submitted_id(e["stdout"]) if e["rc"] == 0 else None, jid)
            self.check(case, "sbatch", (e["rc"], want.text(e["stdout"]), want.text(e["stderr"])),
                       (rc, got.text(out), got.text(err)))
            if e["rc"] != 0 or not jid:
                continue
            seen = (e.get("squeue_after") or "").split()
            state, reason = (seen[1], seen[2] if len(seen) > 2 else "") if len(seen) > 1 else ("", "")
            if state in FINAL or (state == "PENDING" and reason not in ("None", "Priority", "Resources", "")):
                ends = state in FINAL
                self.wait([jid], lambda s, r, ends=ends: s in FINAL if ends else r not in ("None", ""), 20)
                got_states = sorted({(s, r if state == "PENDING" else "") for s, r in self.states(jid)})
                self.check(case, "settled state", [(state, reason if state == "PENDING" else "")], got_states)
            shown = scontrol_records(e.get("scontrol_show_job") or "")
            mine = scontrol_records(self.sh(f"scontrol show job {jid}")[1])
            for field in ("TimeLimit", "TRES", "NumCPUs"):
                if shown and field in shown[0]:
                    self.check(case, f"scontrol {field}", shown[0][field], mine[0].get(field, MISSING) if mine else MISSING)
            self.sh(f"scancel {jid}")

    def replay(self, path: Path) -> None:
        """Replay the recorded case at `path` (a `sbatch/*.json` or `sbatch_bad/bad_inputs.json`)."""
        data = json.loads(path.read_text())
        if path.parent.name == "sbatch_bad":
            self.bad_inputs(data)
        elif "steps" in data:
            self.steps(path.stem, data)
        else:
            self.single(path.stem, data)


def _not_yet_looked_at(row: dict[str, str]) -> bool:
    """A row that may follow one recorded before the scheduler looked at the job: pending for no
    reason yet (or for Priority/Resources), starting, running or done, whatever its exit (a
    short job that exits 1 is FAILED by a first look the suite's load made late)."""
    state, reason = row.get("STATE", ""), row.get("REASON", "")
    return (state in ("CONFIGURING", "RUNNING", "COMPLETING", "COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY")
            or (state == "PENDING" and reason in ("None", "Priority", "Resources")))
