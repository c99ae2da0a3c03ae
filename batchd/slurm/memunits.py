"""Memory sizes as Slurm prints them. Standard library free: the commands import it at start
(cli/fmt.py) and so does batchd.slurm.tres, so squeue, scontrol and the TRES strings convert alike."""


def format_mem(mib: float) -> str:
    """MiB as Slurm's convert_num_unit in CONVERT_NUM_UNIT_EXACT mode prints it: divided by
    1024 while at least 1024 and a multiple of 512, two decimals when not whole (1536 ->
    `1.50G`, 2048 -> `2G`, 1025 -> `1025M`; recorded from the peer: `TRES=...,mem=1.50G`).
    Unlike Slurm it stops at a fraction (1573376 -> `1536.50G`, Slurm's `1.50T`), so that
    `parse_tres` reads back the exact MiB the usage records are charged from."""
    if mib != int(mib):
        return (str(int(mib)) if mib == int(mib) else f"{mib:.4f}".rstrip("0").rstrip(".")) + "M"
    n: float = int(mib)
    units = "MGTPE"
    i = 0
    while n >= 1024 and n == int(n) and int(n) % 512 == 0 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{int(n)}{units[i]}" if n == int(n) else f"{n:.2f}{units[i]}"
