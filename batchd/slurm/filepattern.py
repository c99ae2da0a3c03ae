"""Slurm's filename patterns (`sbatch -o/-e/-i`), as Slurm 22.05 expands them.

`expand_pattern(pattern, job, node, task=0)` expands `%j %J %x %u %A %a %b %N %n %r %s
%t %%` with zero padding (`%3a`, ASCII digits only: other digits such as `²` are ordinary
characters, as in Slurm's filename-pattern code), as `-o`/`-e`/`-i` do; a pattern containing a
backslash is taken literally (backslashes removed), and `none` is /dev/null. `default_output(job)` is
`slurm-%j.out`, or `slurm-%A_%a.out` for an array task.

Pure: the node agent expands a job's file names with it when it launches the job, and
the wire checks a submitted pattern with it.
"""

from __future__ import annotations

NO_VAL_TASK = 4294967294  # what Slurm prints for %a of a job that is not an array task


def default_output(job: dict) -> str:
    """`slurm-%j.out`, or `slurm-%A_%a.out` for an array task."""
    return "slurm-%A_%a.out" if job.get("array_task_id") is not None else "slurm-%j.out"


def expand_pattern(pattern: str, job: dict, node: str, task: int = 0) -> str:
    """Expand Slurm's filename pattern codes (module docstring) for the batch step."""
    if pattern == "none":
        return "/dev/null"
    if "\\" in pattern:
        return pattern.replace("\\", "")
    jid = int(job["id"])
    is_array = job.get("array_task_id") is not None
    task_id = int(job["array_task_id"]) if is_array else NO_VAL_TASK
    numeric = {
        "j": jid, "J": jid, "A": int(job.get("array_job_id") or jid) if is_array else jid,
        "a": task_id, "b": task_id % 10, "n": int(job.get("node_index", 0)),
        "r": int(job.get("restarts") or 0), "t": task,
    }
    text = {"x": str(job.get("name", "")), "u": str(job.get("user", "")), "N": node.split(".")[0],
            "s": "batch"}
    out = []
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        j = i + 1
        while j < n and "0" <= pattern[j] <= "9":  # ASCII only: `%²j` is the literal text `%²j`
            j += 1
        if j >= n:
            out.append(pattern[i:])
            break
        code = pattern[j]
        width = min(int(pattern[i + 1:j]), 10) if j > i + 1 else 0
        if code == "%" and j == i + 1:
            out.append("%")
        elif code in numeric:
            out.append(f"{numeric[code]:0{width}d}" if width else str(numeric[code]))
        elif code in text:
            out.append(text[code])
        else:
            out.append(pattern[i:j + 1])
        i = j + 1
    return "".join(out)
