"""The commands never end in a Python traceback, whatever the user types: each class of
input that fuzzing found crashing a command (a malformed host list, a Unicode digit where
a number goes, an -i value past C's int) gets a Slurm-style error line and a non-zero
exit, and a random sample of odd option values does the same (or succeeds)."""

from __future__ import annotations

import random

import pytest

FOUND = [
    # (argv, exit code, what stderr says)
    (["squeue", "-w", "node[1-"], 1, "squeue: error: 'node[1-' is not a valid node name"),
    (["scancel", "-w", "node[1-"], 1, "scancel: error: 'node[1-' is not a valid node name"),
    (["sinfo", "-n", "node[1-"], 1, "sinfo: error: 'node[1-' is not a valid node name"),
    (["scontrol", "show", "node", "node[1-"], 1, "scontrol: error: 'node[1-' is not a valid node name"),
    (["squeue", "-i", "99999999999999999999"], 1, "squeue: error: --iterate=99999999999999999999 must be"),
    (["sinfo", "-i", "2147483648"], 1, "sinfo: error: --iterate=2147483648 must be a positive integer"),
    (["sbatch", "-N", "²", "--wrap", "true"], 255, "sbatch: error: invalid node count"),
    (["sbatch", "--mem", "²G", "--wrap", "true"], 255, "sbatch: error: Invalid --mem specification"),
    (["sbatch", "-t", "²", "--wrap", "true"], 255, "sbatch: error: Invalid --time specification"),
    (["sbatch", "--array=²", "--wrap", "true"], 1, "sbatch: error: Batch job submission failed: Invalid job array"),
    (["bsub", "-sp", "²", "true"], 255, "²: Bad argument for option -sp. Job not submitted."),
    (["bsub", "-n", "²", "true"], 255, "²: Bad argument for option -n. Job not submitted."),
    (["sacct", "-j", "²"], 1, 'sacct: error: ids: must be job ids such as 123, 123_4 or 123_[1-3] (got "²")'),
    (["sacct", "-j", "1_[0-99999999999]"], 1, "sacct: error: ids: must be job ids such as 123"),
]


@pytest.mark.parametrize("argv,code,message", FOUND, ids=[" ".join(a) for a, _, _ in FOUND])
def test_found_inputs_get_an_error_line(cluster, argv, code, message):
    r = cluster.run(*argv, check=False)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == code, (r.returncode, r.stderr)
    assert message in r.stderr, r.stderr


def test_gpus_with_a_unicode_digit_is_refused_not_crashed(cluster):
    r = cluster.run("sbatch", "--gpus", "²", "--wrap", "true", check=False)
    assert "Traceback" not in r.stderr and r.returncode != 0, r.stderr
    assert r.stderr.startswith("sbatch: error: "), r.stderr


ODD = ["²", "٣", "-1", "0", "99999999999999999999", "1e400", "node[1-", "node[", "[]", "a" * 300,
       "%²j", "1-", ":", "gpu:²", "gpu:h200:²", "x:y:z", "", " ", "\t1", "1_2_3", "0x10", "+5", "١٢"]
OPTS = [("sbatch", ["-N", "-n", "-c", "--mem", "-t", "--gpus", "--gres", "--array", "--nice", "-w",
                    "-x", "-o", "--begin", "--signal", "--dependency", "--mem-per-gpu", "-G"]),
        ("squeue", ["-w", "-j", "-u", "-t", "-i", "-o", "-S", "--start"]),
        ("sinfo", ["-n", "-p", "-t", "-i", "-o"]),
        ("sacct", ["-j", "-S", "-E", "-s", "-o"]),
        ("scancel", ["-w", "-n", "-t", "-u", "-s"]),
        ("bsub", ["-n", "-W", "-sp", "-gpu", "-R", "-q", "-J"])]


def test_random_odd_values_never_crash_a_command(cluster):
    rng = random.Random(12)
    for _ in range(120):
        prog, opts = rng.choice(OPTS)
        opt, val = rng.choice(opts), rng.choice(ODD)
        argv = [prog, opt, val]
        if prog == "sbatch":
            argv += ["--hold", "--wrap", "true"]
        elif prog == "bsub":
            argv += ["-H", "true"]
        elif prog == "squeue" and opt == "-i":
            continue  # a valid -i loops forever
        elif prog == "sinfo" and opt == "-i":
            continue
        r = cluster.run(*argv, check=False)
        assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, (argv, r.stderr)
        assert "internal error" not in r.stderr, (argv, r.stderr)
        if r.returncode != 0:
            assert r.stderr.strip(), (argv, "a failure with no message")
