"""The rows the chargeback rollup writes, and the statements that add them: the hourly
table's rows from tall sums, their sums per day (`usage_daily`) and GPU columns per
hour and account (`gpu_hourly`), and the ledger's run edges (`ledger_edges`). Pure:
no database access; `batchd.store.accounting` runs the statements.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from batchd.model import DAY_S, HOUR_S

# the common TRES, as columns of the hourly table ("typed" = gres/gpu:<the row's gpu_type>)
WIDE = (("cpu", "cpu_s"), ("mem", "mem_s"), ("node", "node_s"), ("billing", "billing_s"), ("gres/gpu", "gpu_s"),
        ("typed", "gpu_type_s"), ("gpu_busy", "gpu_busy_s"), ("gpu_measured", "gpu_measured_s"))
WIDE_INDEX = {name: i for i, (name, _) in enumerate(WIDE)}
VALUE_COLS = [c for _, c in WIDE] + ["amount"]


def upsert_sql(table: str, keys: tuple[str, ...], values: list[str]) -> str:
    """INSERT of one row that adds its values to the row with the same key, if any
    ("{m}" = the driver's parameter mark)."""
    cols = ", ".join(keys + tuple(values))
    return (f"INSERT INTO {table} ({cols}) VALUES (" + ", ".join(["{m}"] * (len(keys) + len(values))) + ") "
            f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
            + ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in values))


KEY = ("account", '"user"', "node", "gpu_type", "tres")
HOURLY_UPSERT = upsert_sql("usage_hourly", ("hour", *KEY), VALUE_COLS)
DAILY_UPSERT = upsert_sql("usage_daily", ("day", *KEY), VALUE_COLS)
GPU_COLS = ["gpu_s", "gpu_type_s", "amount"]
GPU_UPSERT = upsert_sql("gpu_hourly", ("hour", "account", "gpu_type", "tres"), GPU_COLS)


def wide_rows(sums: dict[tuple[int, str, str, str, str, str], float]) -> list[tuple[Any, ...]]:
    """Tall sums ((hour, account, user, node, gpu_type, tres) -> TRES-seconds) -> rows of
    the hourly table: one row of columns per (hour, account, user, node, gpu_type) for
    the common TRES, one row per other TRES."""
    rows: dict[tuple[Any, ...], list[float]] = {}
    n = len(VALUE_COLS)
    for (hour, account, user, node, gtype, tres), v in sums.items():
        i = WIDE_INDEX.get(tres)
        if i is None and gtype and tres == "gres/gpu:" + gtype:
            i = WIDE_INDEX["typed"]
        key = (hour, account, user, node, gtype, "" if i is not None else tres)
        vals = rows.get(key)
        if vals is None:
            vals = rows[key] = [0.0] * n
        vals[n - 1 if i is None else i] += v
    return [(*k, *v) for k, v in rows.items()]


def daily_rows(hourly: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows of the hourly table -> their sums per day (rows of `usage_daily`)."""
    out: dict[tuple[Any, ...], list[float]] = {}
    for row in hourly:
        key = (row[0] - row[0] % DAY_S, *row[1:6])
        vals = out.get(key)
        if vals is None:
            out[key] = list(row[6:])
        else:
            for i, v in enumerate(row[6:]):
                vals[i] += v
    return [(*k, *v) for k, v in out.items()]


_GPU_S, _TYPED_S, _AMOUNT = (VALUE_COLS.index(c) + 6 for c in GPU_COLS)


def gpu_rows(hourly: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows of the hourly table -> their GPU columns per hour, account, GPU type and
    tres (rows of `gpu_hourly`); rows without GPU-seconds leave nothing."""
    out: dict[tuple[Any, ...], list[float]] = {}
    for row in hourly:
        tres = row[5]
        if tres:
            if not tres.startswith("gres/gpu") or not row[_AMOUNT]:
                continue
            vals = [0.0, 0.0, row[_AMOUNT]]
        elif row[_GPU_S] or row[_TYPED_S]:
            vals = [row[_GPU_S], row[_TYPED_S], 0.0]
        else:
            continue
        key = (row[0], row[1], row[4], tres)
        have = out.get(key)
        if have is None:
            out[key] = vals
        else:
            for i, v in enumerate(vals):
                have[i] += v
    return [(*k, *v) for k, v in out.items()]


def tall(gtype: str, tres: str, values: Any) -> Iterator[tuple[str, float]]:
    """One (summed) row of the hourly table -> (TRES name, TRES-seconds) pairs, zeros left out."""
    if tres:
        if values[-1]:
            yield tres, float(values[-1])
        return
    for (name, _), v in zip(WIDE, values, strict=False):
        if v:
            yield ("gres/gpu:" + gtype if name == "typed" else name), float(v)


# the ledger's TRES counted in `ledger_edges` (the charged ones: gres/gpu is not charged)
EDGE_COLS = (("cpu_n", "cpu"), ("mem_n", "mem"), ("node_n", "node"), ("billing_n", "billing"), ("typed_n", "typed"))
EDGE_VALUES = [f"{c}{x}" for _, c in EDGE_COLS for x in ("_n", "_ns")] + ["amount_n", "amount_ns", "gpu_up",
                                                                           "gpu_down"]
EDGE_UPSERT = upsert_sql("ledger_edges", ("hour", "account", '"user"', "gpu_type", "tres"), EDGE_VALUES)


def edge_rows(ledger: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Ledger rows -> rows of `ledger_edges` (see there): each run adds its counts, and
    counts x seconds past the hour, at the hour it starts, and takes them away at the
    hour it ends; its `gres/gpu` count goes to `gpu_up` of the hour it starts in and to
    `gpu_down` of the hour it ends in (rows with tres ""). Empty runs leave nothing."""
    rows: dict[tuple[Any, ...], list[float]] = {}
    n_wide = 2 * len(EDGE_COLS)

    def row(key: tuple[Any, ...]) -> list[float]:
        vals = rows.get(key)
        if vals is None:
            vals = rows[key] = [0.0] * (n_wide + 4)
        return vals

    def add(key: tuple[Any, ...], i: int, n: float, t: int) -> None:
        vals = row(key)
        vals[i] += n
        vals[i + 1] += n * (t % HOUR_S)

    for r in ledger:
        s, e = int(r["start_s"]), int(r["end_s"])
        if e <= s:
            continue
        who = (r["account"], r["user"], r["gpu_type"])
        gpus = float(r.get("gpu_n") or 0.0)
        for sign, t in ((1.0, s), (-1.0, e)):
            hour = t - t % HOUR_S
            for i, (col, _) in enumerate(EDGE_COLS):
                if r[col]:
                    add((hour, *who, ""), 2 * i, sign * r[col], t)
            if gpus:
                row((hour, *who, ""))[n_wide + 2 + (sign < 0)] += gpus
            for name, n in (r.get("other") or {}).items():
                if n:
                    add((hour, *who, name), n_wide, sign * float(n), t)
    return [(*k, *v) for k, v in rows.items()]
