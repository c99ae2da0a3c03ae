"""Record what the real Slurm 22.05 peer (`../shared/slurm-peer/`) prints for the error cases
of issue 15.6, into `recorded/errors_slurm2205.json` beside this file; `test_errors_recorded.py`
replays them through batchd.

Run as root on a machine where the peer runs (its commands are `/usr/bin/*`):

    python3 tests/compat/record_errors.py

Each case is `{"name", "command", "rc", "stdout", "stderr"}`, the command run by `sh -c` in an
empty scratch directory; a case with `"after"` also records that command's answer (for a held
job submitted first, `$JOB` is its id). Jobs are held (`-H`) where accepted, and cancelled
with `scancel -u root` at the end.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent / "recorded" / "errors_slurm2205.json"
SBIN = "/usr/bin/"

CASES: list[tuple[str, str]] = [
    # 6. squeue --noconvert (first: the queue is empty then)
    ("squeue_noconvert", "squeue --noconvert"),
    # 1. squeue -u with an unknown user
    ("squeue_user_unknown", "squeue -u nosuchuser"),
    ("squeue_user_mixed", "squeue -u root,nosuchuser"),
    ("squeue_user_two_unknown", "squeue -u nosuchuser,otheruser"),
    ("squeue_state_unknown", "squeue -t BOGUS"),
    ("squeue_state_mixed", "squeue -t pending,BOGUS"),
    # 2. -w / -x with a node the cluster does not have
    ("squeue_nodelist_unknown", "squeue -w gpu09"),
    ("squeue_nodelist_mixed", "squeue -w vm,gpu09"),
    ("squeue_nodelist_range", "squeue -w 'gpu[01-02]'"),
    ("squeue_nodelist_known", "squeue -w vm"),
    ("sbatch_nodelist_unknown", "sbatch -H -w gpu09 --wrap true"),
    ("sbatch_exclude_unknown", "sbatch -H -x gpu09 --wrap true"),
    ("sbatch_nodelist_mixed", "sbatch -H -w vm,gpu09 --wrap true"),
    ("sbatch_nodelist_excluded", "sbatch -H -w vm -x vm --wrap true"),
    ("scontrol_req_exc_node_list",
     "J=$(sbatch -H --parsable -w vm --wrap true); scontrol show job $J | grep -o 'ReqNodeList=.*'; "
     "scontrol update JobId=$J ExcNodeList=vm; echo rc=$?; scontrol show job $J | grep -o 'ReqNodeList=.*'; "
     "scancel $J"),
    # 3. GPUs no node offers (not held, as in 4.)
    ("sbatch_gres_type_unknown_held", "sbatch -H --gres=gpu:nonexistent:1 --wrap true"),
    ("sbatch_gres_type_unknown", "sbatch --gres=gpu:nonexistent:1 --wrap true"),
    ("sbatch_gres_too_many", "sbatch --gres=gpu:8 --wrap true"),
    ("sbatch_gpus_too_many", "sbatch --gpus=8 --wrap true"),
    # 4. more CPUs than any node (not held: a held job skips the test of whether a node could hold it)
    ("sbatch_cpus_65", "sbatch -c 65 --wrap true"),
    ("sbatch_cpus_17", "sbatch -c 17 --wrap true"),
    # 5. options batchd ignores or refuses
    ("sbatch_mail_type", "sbatch -H --mail-type=END --wrap true"),
    ("sbatch_mail_user", "sbatch -H --mail-user=someone@example.org --wrap true"),
    ("sbatch_mail_type_bad", "sbatch -H --mail-type=bogus --wrap true"),
    ("sbatch_mail_type_one_known", "sbatch -H --mail-type=END,bogus --wrap true"),
    ("sbatch_container", "sbatch -H --container=/tmp --wrap true"),
    ("sbatch_reservation", "sbatch -H --reservation=foo --wrap true"),
    ("sbatch_reservation_env", "SBATCH_RESERVATION=foo sbatch -H --wrap true"),
    ("sbatch_reservation_directive", "printf '#!/bin/sh\\n#SBATCH --reservation=foo\\ntrue\\n' > r.sh; sbatch -H r.sh"),
    ("sbatch_licenses", "sbatch -H --licenses=foo:1 --wrap true"),
    ("sbatch_licenses_short", "sbatch -H -L foo:1 --wrap true"),
    ("sbatch_licenses_directive", "printf '#!/bin/sh\\n#SBATCH -L foo:1\\ntrue\\n' > l.sh; sbatch -H l.sh"),
    ("sbatch_container_env", "SBATCH_CONTAINER=/tmp sbatch -H --wrap true"),
    # 6. squeue --noconvert
    ("squeue_mem_converted", "J=$(sbatch -H --parsable --mem=2G --wrap true); squeue -h -j $J -o %m; scancel $J"),
    ("squeue_mem_noconvert", "J=$(sbatch -H --parsable --mem=2G --wrap true); squeue --noconvert -h -j $J -o %m; scancel $J"),
    ("squeue_mem_1536_noconvert", "J=$(sbatch -H --parsable --mem=1536M --wrap true); squeue --noconvert -h -j $J -o %m; scancel $J"),
    ("squeue_mem_1536", "J=$(sbatch -H --parsable --mem=1536M --wrap true); squeue -h -j $J -o %m; scancel $J"),
    ("squeue_mem_2560", "J=$(sbatch -H --parsable --mem=2560M --wrap true); squeue -h -j $J -o %m; scancel $J"),
    ("squeue_mem_1025", "J=$(sbatch -H --parsable --mem=1025M --wrap true); squeue -h -j $J -o %m; scancel $J"),
    ("scontrol_min_memory_1536",
     "J=$(sbatch -H --parsable --mem=1536M --wrap true); scontrol show job $J | grep -o 'MinMemoryNode=[^ ]*'; "
     "scancel $J"),
    ("scontrol_tres_1536",
     "J=$(sbatch -H --parsable --mem=1536M --wrap true); scontrol show job $J | grep -o 'TRES=[^ ]*'; scancel $J"),
    # scontrol update of the node lists of a pending job
    ("scontrol_update_nodelist_unknown",
     "J=$(sbatch -H --parsable --wrap true); scontrol update JobId=$J NodeList=gpu09; echo rc=$?; scancel $J"),
    ("scontrol_update_exclude_unknown",
     "J=$(sbatch -H --parsable --wrap true); scontrol update JobId=$J ExcNodeList=gpu09; echo rc=$?; scancel $J"),
    ("sbatch_cpus_17_reason", "J=$(sbatch --parsable -c 17 --wrap true) && { sleep 2; squeue -h -j $J -o '%T %r'; scancel $J; }"),
    ("sbatch_cpus_65_mem", "sbatch -c 65 --mem=1G --wrap true"),
    ("sbatch_mem_too_much", "sbatch --mem=100T --wrap true"),
    # exit codes of parse errors
    ("sbatch_unknown_option", "sbatch --no-such-option --wrap true"),
    ("squeue_unknown_option", "squeue --no-such-option"),
    ("sbatch_ambiguous_option", "sbatch --mail true"),
    ("sbatch_missing_argument", "sbatch --wrap"),
    ("sbatch_directive_unknown_option", "printf '#!/bin/sh\\n#SBATCH --bogus\\ntrue\\n' > d.sh; sbatch -H d.sh"),
    ("sbatch_directive_mail_type_bad", "printf '#!/bin/sh\\n#SBATCH --mail-type=bogus\\ntrue\\n' > d.sh; sbatch -H d.sh"),
    ("sbatch_directive_mail_container",
     "printf '#!/bin/sh\\n#SBATCH --mail-type=END\\n#SBATCH --container=/tmp\\ntrue\\n' > d.sh; sbatch -H d.sh"),
]


def main() -> None:
    results = []
    with tempfile.TemporaryDirectory() as d:
        for name, cmd in CASES:
            p = subprocess.run(["sh", "-c", cmd], cwd=d, capture_output=True, text=True,
                               env={**os.environ, "PATH": "/usr/bin:/bin"}, timeout=60)
            results.append({"name": name, "command": cmd, "rc": p.returncode,
                            "stdout": p.stdout, "stderr": p.stderr})
    subprocess.run([SBIN + "scancel", "-u", "root"], check=False)
    version = subprocess.run([SBIN + "sbatch", "--version"], capture_output=True, text=True).stdout.strip()
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"slurm": version, "recorded": datetime.date.today().isoformat(),
                               "by": "tests/compat/record_errors.py", "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
