"""bsub command lines -> JOB_SPEC (cli/bsub.py), without a daemon. The reference is
sbatch's own spec for the same request: both front-ends must hand the daemon the same."""

import io

import pytest

from batchd.cli import bsub, sbatch

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "USER": "u"}
SCRIPT = "#!/bin/bash\n#BSUB -J fromfile\n#BSUB -q teamA -W 20\n\necho start\n#BSUB -q ignored\n"


def bspec(argv, stdin="", env=None, cwd="/work/sub", resolve=None):
    spec, _ = bsub.build(argv, dict(env or ENV), stdin=io.StringIO(stdin), cwd=cwd, resolve_name=resolve)
    return spec


def sspec(argv, stdin="", cwd="/work/sub"):
    spec, _ = sbatch.build(argv, dict(ENV), stdin=io.StringIO(stdin), cwd=cwd)
    return spec


def refused(argv, capsys, stdin="#!/bin/sh\ntrue\n"):
    with pytest.raises(SystemExit) as e:
        bspec(argv, stdin)
    return e.value.code, capsys.readouterr().err


SAME = ("account", "comment", "ntasks", "time_limit_s", "mem_mb", "gres", "output", "error", "open_mode",
        "dependency", "hold", "nice", "exclusive", "nodes_min", "ntasks_per_node", "cpus_per_task", "array",
        "nodelist", "requeue", "workdir", "input", "begin_time", "gpus", "partition", "qos")


@pytest.mark.parametrize("b_args,s_args", [
    (["-q", "training", "-n", "4", "-W", "90"], ["-A", "training", "-n", "4", "-t", "90"]),
    (["-P", "projX", "-J", "train"], ["--comment", "projX", "-J", "train"]),
    (["-o", "out.%J", "-e", "err.%J"], ["-o", "out.%A", "-e", "err.%A", "--open-mode=append"]),
    (["-oo", "out.%J"], ["-o", "out.%A", "--open-mode=truncate"]),
    (["-gpu", "num=2:gmodel=h200", "-R", "rusage[mem=4G]"], ["--gres=gpu:h200:2", "--mem=4G"]),
    (["-gpu", "num=1:mig=1g.24gb:j_exclusive=yes"], ["--gres=gpu:1g.24gb:1"]),
    (["-R", "span[hosts=1] span[ptile=8] affinity[core(2)]", "-n", "8"],
     ["-N", "1", "--ntasks-per-node=8", "-c", "2", "-n", "8"]),
    (["-w", "done(5) && ended(6)"], ["-d", "afterok:5,afterany:6"]),
    (["-w", "exit(5) || started(6)"], ["-d", "afternotok:5?after:6"]),
    (["-H", "-x", "-m", "gpu01 gpu02"], ["-H", "--exclusive", "-w", "gpu01,gpu02"]),
    (["-J", "sweep[1-10:2]%3", "-o", "o.%J.%I"], ["-J", "sweep", "-a", "1-10:2%3", "-o", "o.%A.%a",
                                                  "--open-mode=append"]),
    (["-cwd", "../other", "-i", "in.txt"], ["-D", "../other", "-i", "in.txt"]),
    (["-r"], ["--requeue"]),
    (["-rn"], ["--no-requeue"]),
    (["-sp", "30"], ["--nice=20"]),
])
def test_same_spec_as_sbatch(b_args, s_args):
    script = "#!/bin/sh\ntrue\n"
    b = bspec(b_args, script)
    s = sspec(s_args, script)
    assert {k: b.get(k) for k in SAME} == {k: s.get(k) for k in SAME}
    assert b["lsf"] is True and s["lsf"] is False
    assert set(b) == set(s)


def test_command_line_is_wrapped_in_a_shell_script():
    spec = bspec(["-q", "a", "python", "train.py", "--lr", "0.1"])
    assert spec["script"] == "#!/bin/sh\npython train.py --lr 0.1\n"
    assert spec["name"] == "python train.py --lr 0.1"
    assert spec["argv"] == [] and spec["script_path"] is None
    assert spec["account"] == "a"


def test_script_file_with_directives_and_args(tmp_path):
    p = tmp_path / "job.sh"
    p.write_text(SCRIPT)
    spec = bspec(["-W", "5", str(p), "x", "y"])
    assert spec["script"] == SCRIPT
    assert spec["script_path"] == str(p) and spec["argv"] == ["x", "y"]
    assert spec["account"] == "teamA"              # #BSUB before the first command
    assert spec["time_limit_s"] == 300             # the command line wins over #BSUB -W 20
    assert spec["name"] == "fromfile"


def test_a_file_that_is_no_script_is_a_command(tmp_path):
    p = tmp_path / "prog"
    p.write_bytes(b"\x7fELF\x00binary")
    spec = bspec([str(p), "1"])
    assert spec["script"] == f"#!/bin/sh\n{p} 1\n"


def test_stdin_script_directives():
    spec = bspec([], SCRIPT)
    assert spec["account"] == "teamA" and spec["time_limit_s"] == 1200 and spec["name"] == "fromfile"
    spec = bspec(["-q", "cli", "-J", "mine"], SCRIPT)
    assert spec["account"] == "cli" and spec["name"] == "mine"


def test_stdin_without_shebang_runs_under_sh():
    spec = bspec([], "echo hi\nsleep 1\n")
    assert spec["script"] == "#!/bin/sh\necho hi\nsleep 1\n"
    assert spec["name"] == "echo hi"


def test_resreq_from_script_and_command_line():
    script = '#!/bin/sh\n#BSUB -R "rusage[mem=100]"\ntrue\n'
    assert bspec([], script)["mem_mb"] == 100
    assert bspec(["-R", "rusage[mem=200]"], script)["mem_mb"] == 200
    assert bspec(["-M", "300"], "#!/bin/sh\ntrue\n")["mem_mb"] == 300
    assert bspec(["-R", "rusage[mem=2048]"], "#!/bin/sh\ntrue\n", env=dict(ENV, LSF_UNIT_FOR_LIMITS="KB"))["mem_mb"] == 2


def test_rusage_gpus_and_gpu_option():
    assert bspec(["-R", "rusage[ngpus_physical=3]"], "#!/bin/sh\n")["gres"] == [
        {"name": "gpu", "type": None, "count": 3}]
    assert bspec(["-gpu", "-"], "#!/bin/sh\n")["gres"] == [{"name": "gpu", "type": None, "count": 1}]
    assert bspec([], "#!/bin/sh\n")["gres"] == []


def test_environment_and_env_option():
    spec = bspec([], "#!/bin/sh\n")
    assert spec["export"] == "ALL" and spec["environment"]["HOME"] == "/home/u"
    spec = bspec(["-env", "none"], "#!/bin/sh\n")
    assert spec["export"] == "NONE" and "SLURM_EXPORT_ENV" in spec["environment"]
    spec = bspec(["-env", "all, FOO=bar"], "#!/bin/sh\n")
    assert spec["export"] == "ALL,FOO=bar" and spec["environment"]["FOO"] == "bar"


def test_dependency_by_name_uses_the_resolver():
    spec = bspec(["-w", "done(prep)"], "#!/bin/sh\n", resolve=lambda n: [41, 42] if n == "prep" else [])
    assert spec["dependency"] == "afterok:41:42"


def test_wait_and_begin():
    spec = bspec(["-K", "-b", "23:59"], "#!/bin/sh\n")
    assert spec["wait"] is True
    assert spec["begin_time"] > 0


@pytest.mark.parametrize("argv,text", [
    (["-IS", "bash"], "interactive jobs over SSH or X11"),
    (["-IX", "true"], "interactive jobs over SSH or X11"),
    (["-W", "soon"], "soon: Bad RUNLIMIT specification. Job not submitted."),
    (["-n", "x"], "Bad argument for option -n. Job not submitted."),
    (["-gpu", "num=1:mig=3/2"], "MIG profile"),
    (["-w", "done(1) && ended(2) || exit(3)"], "cannot mix"),
    (["-t", "12:00"], "termination time"),
    (["-sp", "high"], "Bad argument for option -sp"),
    (["-b", "noon"], "Bad begin time"),
    (["-Z"], "bsub: illegal option -- Z"),
    (["-q"], "option requires an argument -- q"),
])
def test_refusals_exit_255(argv, text, capsys):
    code, err = refused(argv, capsys)
    assert code == 255
    assert text in err


def test_empty_stdin_is_refused(capsys):
    code, err = refused([], capsys, stdin="  \n")
    assert code == 255 and "No command is specified. Job not submitted." in err


def test_bad_bsub_lines_in_script(capsys):
    code, err = refused([], capsys, stdin="#!/bin/sh\n#BSUB -W never\ntrue\n")
    assert code == 255 and "never: Bad RUNLIMIT specification. Job not submitted." in err
    code, err = refused([], capsys, stdin="#!/bin/sh\n#BSUB -Z\ntrue\n")
    assert code == 255 and "#BSUB line: bsub: illegal option -- Z" in err


def test_help_and_version(capsys):
    for flag in ("-h", "--help"):
        with pytest.raises(SystemExit) as e:
            bspec([flag])
        assert e.value.code == 0
        assert "-gpu" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        bspec(["-V"])
    assert e.value.code == 0


def test_bsub_stays_light():
    """bsub's startup budget: building a spec imports none of the heavy modules."""
    import subprocess
    import sys

    code = ("import io, sys\nfrom batchd.cli import bsub\n"
            "bsub.build(['-q', 'a', '-J', 'x[1-3]', '-W', '5', '-M', '4G', '-gpu', 'num=1', '-o', 'o.%J',"
            " '-R', 'rusage[mem=1G]', '-w', 'done(1)', 'true'], {'PATH': '/bin'}, stdin=io.StringIO(''))\n"
            "print(' '.join(m for m in ('click', 'sqlalchemy', 'http.client', 'dataclasses', 'urllib.request')"
            " if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_output_directory_gets_job_id_files(tmp_path):
    (tmp_path / "logs").mkdir()
    spec = bspec(["-o", "logs", "-e", "errs/", "true"], cwd=str(tmp_path))
    assert spec["output"] == "logs/%A.out"
    assert spec["error"] == "errs/%A.err"
    assert bspec(["-o", "logs.txt", "true"], cwd=str(tmp_path))["output"] == "logs.txt"
