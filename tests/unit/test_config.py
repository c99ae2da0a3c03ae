"""The config file: defaults, the examples, and one clear message per mistake."""

import os

import pytest

from batchd.config import load_config, parse_config
from batchd.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE = {"node": [{"name": "n1", "cpus": 4, "memory_mb": 1000}]}


@pytest.mark.parametrize("name", ["cluster-16gpu.toml", "slurm-reference.toml"])
def test_examples_load(name):
    cfg = load_config(os.path.join(ROOT, "examples", name))
    assert cfg.nodes and cfg.partitions and cfg.default_partition()


def test_defaults():
    cfg = parse_config(dict(NODE))
    assert cfg.db_url().startswith("sqlite:///") and cfg.partitions[0].nodes == ["n1"]
    assert [q.name for q in cfg.qos] == ["normal", "interactive", "inference"] and cfg.interval_s == 5
    assert [q.preemptible for q in cfg.qos] == [True, False, False]
    assert cfg.cycle_min_gap_s == 0.05
    assert parse_config({**NODE, "scheduler": {"cycle_min_gap_ms": 0}}).cycle_min_gap_s == 0


@pytest.mark.parametrize("data, where", [
    ({}, "node"),
    ({"node": [{"name": "n1", "cpus": "x", "memory_mb": 1}]}, "node[0].cpus"),
    ({"node": [{"name": "n1", "cpus": 1, "memory_mb": 1, "gpus": [{"count": 2}]}]}, "node[0].gpus[0].type"),
    ({**NODE, "bogus": 1}, "bogus"),
    ({**NODE, "partition": [{"name": "p", "nodes": ["zz"]}]}, "partition[0].nodes"),
    ({**NODE, "partition": [{"name": "p", "max_time": "1-xx"}]}, "partition[0].max_time"),
    ({**NODE, "scheduler": {"interval_s": 0}}, "scheduler.interval_s"),
    ({**NODE, "scheduler": {"cycle_min_gap_ms": -1}}, "scheduler.cycle_min_gap_ms"),
    ({**NODE, "accounting": {"tres_billing_weights": "CPU=abc"}}, "accounting.tres_billing_weights"),
    ({**NODE, "gpu_env": "names"}, "gpu_env"),
    ({**NODE, "qos": [{"name": "q", "min_runtime_reclaim_s": -1}]}, "qos[0].min_runtime_reclaim_s"),
    ({**NODE, "qos": [{"name": "q", "min_runtime_preempt_s": "10:00"}]}, "qos[0].min_runtime_preempt_s"),
])
def test_errors_name_the_key(data, where):
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert f": {where}:" in e.value.message, e.value.message


def test_password_file_goes_into_the_url(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("s3cr@t\n")
    cfg = parse_config({**NODE, "database_url": "postgresql://batchd@db:5432/batchd",
                        "database_password_file": str(pw)})
    assert cfg.db_url() == "postgresql://batchd:s3cr%40t@db:5432/batchd"


def test_request_size_limits():
    """[limits] max_script_bytes / max_env_bytes / max_hostlist_names: Slurm's 4 MiB script
    cap by default, integers >= 1 when given (batchd.wire reads them)."""
    cfg = parse_config(dict(NODE))
    assert (cfg.limits["max_script_bytes"], cfg.limits["max_env_bytes"], cfg.limits["max_hostlist_names"]) == \
        (4 << 20, 1 << 20, 10_000)
    cfg = parse_config({**NODE, "limits": {"max_script_bytes": 100, "max_hostlist_names": 5}})
    assert (cfg.limits["max_script_bytes"], cfg.limits["max_hostlist_names"]) == (100, 5)
    for bad in ({"max_script_bytes": 0}, {"max_env_bytes": "1M"}, {"max_hostlist_names": 1.5}):
        with pytest.raises(ConfigError, match=f"limits.{next(iter(bad))}: must be an integer >= 1"):
            parse_config({**NODE, "limits": bad})


def test_qos_min_runtimes():
    cfg = parse_config({**NODE, "qos": [{"name": "low", "min_runtime_reclaim_s": 600, "min_runtime_preempt_s": 60},
                                        {"name": "high"}]})
    got = {q.name: (q.min_runtime_reclaim_s, q.min_runtime_preempt_s) for q in cfg.qos}
    assert got == {"normal": (0, 0), "low": (600, 60), "high": (0, 0)}
    with pytest.raises(ConfigError) as e:
        parse_config({**NODE, "qos": [{"name": "q", "min_runtime_preempt_s": 1.5}]})
    assert e.value.message.endswith(": qos[0].min_runtime_preempt_s: must be an integer >= 0, got 1.5")
