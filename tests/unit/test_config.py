"""The config file: defaults, the examples, and one clear message per mistake."""

import os

import pytest

from batchd import configkeys as keys
from batchd.config import LIMITS, load_config, parse_config
from batchd.errors import ConfigError
from batchd.priority.policy import DEFAULT_POLICY

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
    ({**NODE, "qos": [{"name": "q", "max_wall": "soon"}]}, "qos[0].max_wall"),
    ({**NODE, "qos": [{"name": "q", "idle_timeout": "an hour"}]}, "qos[0].idle_timeout"),
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
    cap by default, integers >= 1 when given (batchd.server.wire reads them)."""
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


N1 = {"name": "n1", "cpus": 4, "memory_mb": 1000}
# (table, a config with one wrong key, the key's path, the words the message ends with)
TYPOS = [
    ("top", {"clustr_name": "x"}, "clustr_name", 'unknown key at the top level (did you mean "cluster_name"?)'),
    ("scheduler", {"scheduler": {"intervl_s": 5}}, "scheduler.intervl_s",
     'unknown key in [scheduler] (did you mean "interval_s"?)'),
    ("priority", {"priority": {"weight_fairshre": 10000}}, "priority.weight_fairshre",
     'unknown key in [priority] (did you mean "weight_fairshare"?)'),
    ("accounting", {"accounting": {"rollup_interval": 60}}, "accounting.rollup_interval",
     'unknown key in [accounting] (did you mean "rollup_interval_s"?)'),
    ("report", {"report": {"time_zone": "UTC"}}, "report.time_zone",
     'unknown key in [report] (did you mean "timezone"?)'),
    ("limits", {"limits": {"max_conections": 9}}, "limits.max_conections",
     'unknown key in [limits] (did you mean "max_connections"?)'),
    ("node", {"node": [{**N1, "memory": 1}]}, "node[0].memory",
     'unknown key in [[node]] (did you mean "memory_mb"?)'),
    ("node.gpus", {"node": [{**N1, "gpus": [{"type": "h200", "cuont": 4}]}]}, "node[0].gpus[0].cuont",
     'unknown key in a node\'s gpus entry (did you mean "count"?)'),
    ("node.gpus.mig", {"node": [{**N1, "gpus": [{"type": "h200", "index": 0, "mig": [
        {"profile": "1g.18gb", "uuid": "MIG-1", "profil": "x"}]}]}]}, "node[0].gpus[0].mig[0].profil",
     'unknown key in a GPU\'s mig entry (did you mean "profile"?)'),
    ("node.gpus.links", {"node": [{**N1, "gpus": [{"type": "h200", "index": 0, "links": {"nvlinks": [-1]}}]}]},
     "node[0].gpus[0].links.nvlinks", 'unknown key in a GPU\'s links (did you mean "nvlink"?)'),
    ("partition", {"partition": [{"name": "p", "max_tme": "1:00:00"}]}, "partition[0].max_tme",
     'unknown key in [[partition]] (did you mean "max_time"?)'),
    ("qos", {"qos": [{"name": "q", "preemptable": False}]}, "qos[0].preemptable",
     'unknown key in [[qos]] (did you mean "preemptible"?)'),
]


@pytest.mark.parametrize("data, where, words", [t[1:] for t in TYPOS], ids=[t[0] for t in TYPOS])
def test_a_typo_is_refused_in_every_table(data, where, words):
    with pytest.raises(ConfigError) as e:
        parse_config({**NODE, **data})
    assert e.value.message == f"batchd.toml: {where}: {words}"


def test_every_table_has_its_typo_case():
    """Every table of the file but [gpu_aliases] (whose keys are GPU product names) has a
    case in TYPOS: a new table needs its key list (batchd.configkeys) and a case here."""
    tables = {k for k, v in FULL.items() if isinstance(v, dict | list)} - {"gpu_aliases"}
    assert {t[0].split(".")[0] for t in TYPOS} == tables | {"top"}


@pytest.mark.parametrize("data, where, home", [
    ({"scheduler": {"decay_half_life_s": 3600}}, "scheduler.decay_half_life_s", "[priority]"),
    ({"priority": {"kill_wait_s": 5}}, "priority.kill_wait_s", "[scheduler]"),
    ({"priority": {"tres_billing_weights": "CPU=1.0"}}, "priority.tres_billing_weights", "[accounting]"),
    ({"scheduler": {"max_connections": 9}}, "scheduler.max_connections", "[limits]"),
    ({"scheduler": {"cluster_name": "x"}}, "scheduler.cluster_name", "at the top level"),
], ids=["priority_key_in_scheduler", "scheduler_key_in_priority", "billing_weights_in_priority",
        "limit_in_scheduler", "top_key_in_scheduler"])
def test_a_key_of_another_table_says_where_it_belongs(data, where, home):
    with pytest.raises(ConfigError) as e:
        parse_config({**NODE, **data})
    assert e.value.message.startswith(f"batchd.toml: {where}: unknown key in ")
    assert e.value.message.endswith(f"(it belongs {home if home.startswith('at') else 'in ' + home})")


def test_the_priority_keys_are_the_policy_keys():
    assert set(keys.PRIORITY) == set(DEFAULT_POLICY) - {"tres_billing_weights"}


SCHEDULER = {"interval_s": 5, "cycle_min_gap_ms": 50, "kill_wait_s": 30, "grace_time_s": 60,
             "def_mem_per_cpu_mb": 1024, "enforce_memory": True, "node_timeout_s": 30, "min_job_age_s": 300,
             "spool_keep_s": 3600, "budget_recount_s": 60, "passes": ["allocate"], "placement": "spread",
             "backfill": False, "backfill_max_reservations": 5, "quota_reclaim_by_priority": True,
             "reclaimer_saturation_multiplier": 1.5, "fairshare_k_value": 0.5}
GPUS = [{"type": "h200", "index": 0, "uuid": "GPU-0", "slices": 7, "memory_mb": 1, "minor": 0, "numa": 0,
         "cpus": [0], "links": {"nvlink": [-1], "nvlink_p2p": [False], "pcie": [0]},
         "mig": [{"profile": "1g.18gb", "uuid": "MIG-0", "slices": 1, "parent_slices": 7, "memory_mb": 1}]},
        {"type": "l4", "count": 2}]
#: a config with every key of every table
FULL = {
    "cluster_name": "c", "scheduler": SCHEDULER,
    "priority": {k: v for k, v in DEFAULT_POLICY.items() if k != "tres_billing_weights"},
    "accounting": {"tres_billing_weights": "CPU=1.0", "sample_interval_s": 30, "rollup_interval_s": 300,
                   "zero_gpu_flag_s": 3600},
    "report": {"timezone": "UTC"}, "limits": {k: d for k, (d, _) in LIMITS.items()},
    "gpu_aliases": {"NVIDIA H200": "h200"},
    "node": [{**N1, "gpus": GPUS, "features": ["ib"]}],
    "partition": [{"name": "p", "nodes": ["n1"], "default": True, "max_time": "1-00:00:00",
                   "default_time": "1:00:00", "priority_job_factor": 2}],
    "qos": [{"name": "q", "priority": 5, "preemptible": False, "usage_factor": 2.0, "max_gpus_per_user": 4,
             "grace_time_s": 30, "min_runtime_reclaim_s": 60, "min_runtime_preempt_s": 60,
             "max_wall": "8:00:00", "idle_timeout": "30"}]}


def test_every_known_key_loads():
    """Every key of every table is accepted (with a value of its kind)."""
    assert set(SCHEDULER) == set(keys.SCHEDULER) and set(FULL["priority"]) == set(keys.PRIORITY)
    assert set(GPUS[0]) | {"count"} == set(keys.GPU) and set(GPUS[0]["mig"][0]) == set(keys.MIG)
    assert set(FULL["node"][0]) == set(keys.NODE) and set(FULL["partition"][0]) == set(keys.PARTITION)
    assert set(FULL["qos"][0]) == set(keys.QOS) and set(FULL["accounting"]) == set(keys.ACCOUNTING)
    cfg = parse_config(FULL)
    assert cfg.scheduler == SCHEDULER and cfg.priority == FULL["priority"] and cfg.qos[-1].name == "q"
    assert (cfg.qos[-1].max_wall_s, cfg.qos[-1].idle_timeout_s) == (8 * 3600, 30 * 60)


def test_every_config_the_examples_and_docs_hold_loads():
    """The example configs and the docs' config blocks use known keys only."""
    import glob
    import re
    import tomllib

    loaded = 0
    for f in sorted(glob.glob(os.path.join(ROOT, "examples", "*.toml"))):
        with open(f, "rb") as fh:
            data = tomllib.load(fh)
        if "node" in data:  # a daemon config (the others are accounts files)
            parse_config(data, f)
            loaded += 1
    for f in [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]:
        with open(f) as fh:
            text = fh.read()
        for block in re.findall(r"```toml\n(.*?)```", text, re.S):
            data = tomllib.loads(block)
            if set(data) & {"scheduler", "priority", "accounting", "node", "partition", "qos", "limits"}:
                parse_config({**NODE, **data}, f)
                loaded += 1
    assert loaded >= 3
