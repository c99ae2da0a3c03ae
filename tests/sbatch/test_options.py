"""The getopt_long-style parser shared by the Slurm-named commands."""

import pytest

from batchd.cli.options import Opt, OptionError, parse

TABLE = [
    Opt("t", "time", "required", "time"),
    Opt("p", "partition", "required", "partition"),
    Opt("H", "hold", "none", "hold"),
    Opt("v", "verbose", "none", "verbose", multi=True),
    Opt(None, "requeue", "none", "requeue"),
    Opt(None, "no-requeue", "none", "requeue", const=False),
    Opt(None, "nice", "optional", "nice"),
    Opt(None, "gpus", "required", "gpus"),
    Opt(None, "gpus-per-node", "required", "gpus_per_node"),
    Opt(None, "gpus-per-task", "required", "gpus_per_task"),
    Opt("d", "dependency", "required", "dependency", multi=True),
    Opt(None, "parsable", "none", "parsable"),
]


def p(*argv, stop=True):
    return parse("sbatch", list(argv), TABLE, stop_at_positional=stop)


def test_short_forms():
    assert p("-t10", "-p", "gpu")[0] == {"time": "10", "partition": "gpu"}


def test_long_forms():
    assert p("--time=1:00", "--partition", "debug")[0] == {"time": "1:00", "partition": "debug"}


def test_bundled_flags_and_trailing_arg():
    vals, rest = p("-Hvvt5", "x.sh")
    assert vals == {"hold": True, "verbose": 2, "time": "5"}
    assert rest == ["x.sh"]


def test_bundled_flag_then_separate_arg():
    assert p("-Ht", "7")[0] == {"hold": True, "time": "7"}


def test_unique_prefix_abbreviation():
    assert p("--part=gpu", "--pars")[0] == {"partition": "gpu", "parsable": True}


def test_exact_name_beats_longer_names():
    assert p("--gpus=2")[0] == {"gpus": "2"}


def test_ambiguous_prefix():
    with pytest.raises(OptionError) as e:
        p("--gpus-per=1")
    assert e.value.message.startswith("sbatch: option '--gpus-per' is ambiguous; possibilities: ")
    assert "'--gpus-per-node'" in e.value.message and "'--gpus-per-task'" in e.value.message
    assert e.value.exit_code == 1


def test_prefix_matching_aliases_of_one_option_is_not_ambiguous():
    table = [Opt(None, "quiet", "none", "q"), Opt(None, "quite", "none", "q"),
             Opt(None, "mem", "required", "mem"), Opt(None, "mem-per-cpu", "required", "mpc")]
    assert parse("sbatch", ["--qui"], table)[0] == {"q": True}
    assert parse("sbatch", ["--mem=4G"], table)[0] == {"mem": "4G"}
    with pytest.raises(OptionError) as e:
        parse("sbatch", ["--me=1"], table)
    assert "'--mem' '--mem-per-cpu'" in e.value.message


def test_negative_flag_shares_key():
    assert p("--requeue")[0] == {"requeue": True}
    assert p("--no-req")[0] == {"requeue": False}


def test_later_occurrence_wins_and_multi_collects():
    vals, _ = p("--requeue", "--no-requeue", "-d", "afterok:1", "--dependency=afterany:2")
    assert vals["requeue"] is False
    assert vals["dependency"] == ["afterok:1", "afterany:2"]


def test_optional_argument():
    assert p("--nice")[0] == {"nice": None}
    assert p("--nice=5")[0] == {"nice": "5"}
    vals, rest = p("--nice", "5")
    assert vals == {"nice": None} and rest == ["5"]


def test_stop_at_first_positional():
    vals, rest = p("-H", "job.sh", "-t", "5", "--", "x")
    assert vals == {"hold": True}
    assert rest == ["job.sh", "-t", "5", "--", "x"]


def test_permute_when_not_stopping():
    vals, rest = parse("squeue", ["a", "-H", "b", "--", "-t"], TABLE)
    assert vals == {"hold": True}
    assert rest == ["a", "b", "-t"]


def test_double_dash_ends_options():
    vals, rest = p("-H", "--", "-t", "5")
    assert vals == {"hold": True} and rest == ["-t", "5"]


def test_lone_dash_is_positional():
    assert p("-", "arg") == ({}, ["-", "arg"])


@pytest.mark.parametrize(
    "argv, first_line",
    [
        (["--foo"], "sbatch: unrecognized option '--foo'"),
        (["--foo=3"], "sbatch: unrecognized option '--foo'"),
        (["-Z"], "sbatch: invalid option -- 'Z'"),
        (["-HZ"], "sbatch: invalid option -- 'Z'"),
        (["--time"], "sbatch: option '--time' requires an argument"),
        (["--ti"], "sbatch: option '--time' requires an argument"),
        (["-t"], "sbatch: option requires an argument -- 't'"),
        (["--hold=1"], "sbatch: option '--hold' doesn't allow an argument"),
    ],
    ids=["unknown-long", "unknown-long-eq", "unknown-short", "unknown-bundled", "missing-long",
         "missing-abbrev", "missing-short", "flag-with-arg"],
)
def test_errors(argv, first_line):
    with pytest.raises(OptionError) as e:
        p(*argv)
    assert e.value.message == first_line + '\nTry "sbatch --help" for more information'
    assert e.value.exit_code == 1


def test_exit_code_is_configurable():
    with pytest.raises(OptionError) as e:
        parse("squeue", ["--bogus"], TABLE, exit_code=255)
    assert e.value.exit_code == 255
    assert e.value.message.endswith('Try "squeue --help" for more information')
