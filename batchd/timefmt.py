"""Slurm's time-limit grammar, for the config file (`max_time`, `default_time`).

`M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`, `UNLIMITED`/`INFINITE` -> seconds
(-1 for unlimited); `None` when the text is not a time.
"""


def parse_slurm_time(text: str) -> int | None:
    t = text.strip()
    if t.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return -1
    days = 0
    if "-" in t:
        d, _, t = t.partition("-")
        if not d.isdigit():
            return None
        days = int(d)
        parts = t.split(":")
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            return None
        h, m, s = (list(map(int, parts)) + [0, 0])[:3]
    else:
        parts = t.split(":")
        if not all(p.isdigit() for p in parts) or len(parts) > 3:
            return None
        nums = list(map(int, parts))
        if len(nums) == 1:
            h, m, s = 0, nums[0], 0
        elif len(nums) == 2:
            h, m, s = 0, nums[0], nums[1]
        else:
            h, m, s = nums
    return ((days * 24 + h) * 60 + m) * 60 + s
