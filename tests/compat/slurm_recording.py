"""Reading and normalising the recorded Slurm 22.05 cases of tests/data/slurm-reference for
the replay (slurm_replay.py): the recordings' tables and `scontrol` blocks, the jobs'
output files, and how each side writes what differs between two runs.

Normalised on both sides, and nothing else:
- job ids: the k-th job of a case is `J<k>`, an id up to 64 above it `J<k>+<n>` (array tasks:
  Slurm numbers them after the array's own id, the last task keeping that id). Numbers are
  read as ids only where a job id stands (sbatch's answer, the first column of a table,
  `JobId=`, a dependency, `*** JOB n ON`, SLURM_JOB_ID and kin, the `%j`/`%A` of a file name);
- clock readings: ISO times are `<TIME>`, epoch seconds `<EPOCH>`;
- the submit directories' root (`/scratch/golden` in the recording), the submit host (`vm`),
  and the user, uid, gid and home of whoever replays (root in the recording);
- PATH (sanitised by the recorder) and SLURM_TASK_PID (a pid) only have to be there;
- GPU index lists are compared exactly where the recording has the first-fit `0..n-1` (each
  case starts on an idle node), else as the same number of distinct indices;
- CUDA_DEVICE_ORDER is batchd's deliberate addition to the job environment (DESIGN.md).
"""

from __future__ import annotations

import calendar
import re
import time
from pathlib import Path

RECORDED_ROOT = "/scratch/golden"
RECORDED_HOST = "vm"
RECORDED_USER = {"user": "root", "uid": "0", "gid": "0", "home": "/root"}
#: the variables the recorder kept of a job's `env | sort` (the rest of its environment was dropped)
ENV_KEPT = re.compile(r"(SLURM\w*|SLURMD_NODENAME|CUDA_\w+|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES|ZE_AFFINITY_MASK"
                      r"|FOO|BAZ|HOME|USER|LOGNAME|SHELL|PWD|LANG|TERM|TMPDIR|ENVIRONMENT|MAIL|HOSTNAME|SHLVL|PATH)")
ENV_LINE = re.compile(r"([A-Za-z_]\w*)=(.*)")
ID_VARS = {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID"}
#: scontrol fields compared (after a requeue, in the multi-job case); the paths are _PATH_FIELDS
SCONTROL_FIELDS = ("JobName", "JobState", "Reason", "Dependency", "Requeue", "Restarts", "ExitCode", "TimeLimit",
                   "Partition", "Account", "QOS", "NumCPUs", "TRES", "WorkDir", "StdOut", "StdErr", "StdIn")
_PATH_FIELDS = {"StdOut", "StdErr", "StdIn"}
SLOW_S = 60
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
EPOCH = re.compile(r"\b1\d{9}(?:\.\d+)?\b")
MISSING = "<missing>"


# --------------------------------------------------------------------------- reading recordings
def scontrol_records(text: str) -> list[dict[str, str]]:
    """`scontrol show job` output as one {field: value} per job block."""
    return [dict(re.findall(r"([A-Za-z][\w/:]*)=(\S*)", block)) for block in re.split(r"\n\s*\n", text.strip())
            if "=" in block]


def table(text: str, sep: str | None = None) -> list[dict[str, str]]:
    """A squeue/sacct table (header line first) as one dict per row."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    if sep:
        head = lines[0].split(sep)
        return [dict(zip(head, ln.split(sep), strict=False)) for ln in lines[1:]]
    head = lines[0].split()
    return [dict(zip(head, ln.split(None, len(head) - 1), strict=False)) for ln in lines[1:]]


def _epoch(iso: str | None) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(iso or "", "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def recorded_span_s(rec: dict) -> float:
    """Seconds from the first submission to the last end the recording shows (0 if none)."""
    submits, ends = [], []
    for key in ("scontrol_show_job_at_submit", "scontrol_show_job_final"):
        for r in scontrol_records(rec.get(key) or ""):
            submits.append(_epoch(r.get("SubmitTime")))
            ends.append(_epoch(r.get("EndTime")))
    for key in ("sacct", "sacct_final"):
        for r in table((rec.get(key) or {}).get("stdout", ""), "|"):
            submits.append(_epoch(r.get("Start")))
            ends.append(_epoch(r.get("End")))
    s, e = [x for x in submits if x], [x for x in ends if x]
    return max(e) - min(s) if s and e else 0.0


def is_slow(rec: dict) -> bool:
    """A case whose recording took minutes (a time limit, a requeue's two-minute hold)."""
    return "steps" not in rec and recorded_span_s(rec) > SLOW_S


def split_output(content: str) -> tuple[dict[str, str] | None, list[str]]:
    """(the kept variables of an `env | sort` dump, or None when the file holds none; the
    other lines, trailing blank ones dropped)."""
    lines = content.split("\n")
    dump = sum(1 for ln in lines if ENV_LINE.fullmatch(ln)) >= 3
    env: dict[str, str] | None = {} if dump else None
    rest = []
    for ln in lines:
        m = ENV_LINE.fullmatch(ln)
        if env is not None and m:
            if ENV_KEPT.fullmatch(m.group(1)):
                env[m.group(1)] = m.group(2)
            continue
        rest.append(ln)
    while rest and rest[-1] == "":
        rest.pop()
    return env, rest


def files_under(directory: Path) -> dict[str, str]:
    """{relative name: text} of the files below `directory` (hidden ones aside)."""
    out = {}
    for path in sorted(directory.rglob("*")) if directory.is_dir() else []:
        rel = path.relative_to(directory)
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            out[str(rel)] = path.read_text(errors="replace")
    return out


# --------------------------------------------------------------------------- normalisation
class JobIds:
    """The job ids of one case on both sides, in submit order (None: none was given)."""

    def __init__(self) -> None:
        self.bases: dict[str, list[int | None]] = {"want": [], "got": []}

    def add(self, want: str | None, got: str | None) -> None:
        self.bases["want"].append(int(want) if want else None)
        self.bases["got"].append(int(got) if got else None)

    def symbol(self, side: str, number: str) -> str:
        n = int(number)
        near = [(base, k) for k, base in enumerate(self.bases[side], 1) if base is not None and base <= n <= base + 64]
        if not near:
            return number
        base, k = max(near)
        return f"J{k}" if n == base else f"J{k}+{n - base}"

    def replayed(self, recorded: str) -> str:
        """The replay's id for an id of the recording (the recorded one if unknown)."""
        sym = self.symbol("want", recorded)
        m = re.fullmatch(r"J(\d+)(?:\+(\d+))?", sym)
        if not m:
            return recorded
        base = self.bases["got"][int(m.group(1)) - 1]
        return recorded if base is None else str(base + int(m.group(2) or 0))

    def command(self, recorded: str) -> str:
        """A recorded command with its job ids (after -j, `release`, `requeue`, `show job`,
        scancel, a dependency) made the replay's."""
        def ids(m: re.Match) -> str:
            return m.group(1) + re.sub(r"\d+", lambda d: self.replayed(d.group(0)), m.group(2))
        out = re.sub(r"((?:-j|--jobs?)[ =]?)([\d,_]+)", ids, recorded)
        out = re.sub(r"((?:show job|release|requeue|hold|scancel) )([\d,_]+)", ids, out)
        return re.sub(r"(--dependency=\w+:)([\d:]+)", ids, out)


class Side:
    """How one side (`want`: the recording, `got`: the replay) writes what differs between runs."""

    def __init__(self, side: str, ids: JobIds, root: str, host: str, user: dict[str, str]):
        self.side, self.ids, self.root, self.host, self.user = side, ids, root, host, user

    def jid(self, number: str) -> str:
        return self.ids.symbol(self.side, number)

    def cell(self, s: str) -> str:
        """One value (a table cell, a `Field=` of scontrol, a line of a job's output)."""
        s = s.replace(self.root, RECORDED_ROOT)
        s = ISO.sub("<TIME>", s)
        s = EPOCH.sub("<EPOCH>", s)
        s = re.sub(r"\b((?:Array)?JobId=)(\d+)", lambda m: m.group(1) + self.jid(m.group(2)), s)
        s = re.sub(r"(\*\*\* JOB )(\d+)", lambda m: m.group(1) + self.jid(m.group(2)), s)
        s = re.sub(r"(after\w*:)(\d+(?::\d+)*)",
                   lambda m: m.group(1) + ":".join(self.jid(x) for x in m.group(2).split(":")), s)
        return re.sub(rf"\bby {self.user['uid']}\b", "by <UID>", s)

    def text(self, s: str) -> str:
        """A command's whole output: also sbatch's answer and the job id opening a table row."""
        s = re.sub(r"(Submitted batch job )(\d+)", lambda m: m.group(1) + self.jid(m.group(2)), s)
        s = re.sub(r"(?m)^(\d+)(?=[_.;| \t]|$)", lambda m: self.jid(m.group(1)), s)
        return self.cell(s)

    def path(self, value: str) -> str:
        """A path whose last part is a file name (scontrol's StdOut=, StdErr=)."""
        head, sep, name = self.cell(value).rpartition("/")
        return head + sep + self.file_name(name)

    def job_id_field(self, value: str) -> str:
        """A JobID cell (`16`, `16_3`, `16_3.batch`, `16_[2-7%2]`) with its job id symbolic."""
        m = re.fullmatch(r"(\d+)(.*)", value.strip())
        return self.jid(m.group(1)) + m.group(2) if m else value

    def file_name(self, name: str) -> str:
        name = re.sub(r"(?<!\d)(\d+)_(\d+)(?!\d)", lambda m: f"{self.jid(m.group(1))}_{m.group(2)}", name)  # %A_%a
        name = re.sub(r"(?<![A-Za-z0-9_])(\d+)(?![\d_])", lambda m: self.jid(m.group(1)), name)
        return re.sub(rf"(?<![A-Za-z0-9]){re.escape(self.user['user'])}(?![A-Za-z0-9])", "<USER>", name)

    def env(self, var: str, value: str) -> str:
        value = value.replace(self.root, RECORDED_ROOT)
        if var in ID_VARS:
            return self.jid(value) if value.isdigit() else value
        if var in ("SLURM_SUBMIT_HOST", "HOSTNAME"):
            return "<HOST>" if value == self.host else value
        mine = {"USER": "user", "LOGNAME": "user", "SLURM_JOB_USER": "user", "SLURM_JOB_UID": "uid",
                "SLURM_JOB_GID": "gid", "HOME": "home"}.get(var)
        if mine:
            return f"<{mine.upper()}>" if value == self.user[mine] else value
        if var == "MAIL":
            return re.sub(rf"/{re.escape(self.user['user'])}$", "/<USER>", value)
        return value


def _first_fit(value: str) -> bool:
    return value.split(",") == [str(i) for i in range(len(value.split(",")))]


def gpu_list_agrees(want: str, got: str) -> bool:
    if want == got or MISSING in (want, got) or _first_fit(want):
        return want == got
    try:
        w, g = [int(x) for x in want.split(",")], [int(x) for x in got.split(",")]
    except ValueError:
        return False
    return len(w) == len(g) == len(set(g))


def submitted_id(stdout: str) -> str | None:
    """The job id sbatch printed (`Submitted batch job N`, or --parsable's `N[;cluster]`)."""
    m = re.search(r"Submitted batch job (\d+)", stdout) or re.fullmatch(r"\s*(\d+)(?:;\S+)?\s*", stdout)
    return m.group(1) if m else None


def scontrol_fields(side: Side, output: str) -> dict[str, str]:
    """The SCONTROL_FIELDS of the first job `scontrol show job` printed, as `side` writes them."""
    records = scontrol_records(output)
    if not records:
        return dict.fromkeys(SCONTROL_FIELDS, MISSING)
    return {f: (side.path if f in _PATH_FIELDS else side.cell)(records[0].get(f, MISSING)) for f in SCONTROL_FIELDS}
