#!/usr/bin/env bash
# batchd on a real GPU machine, read-only for the GPUs: it NEVER changes a GPU setting (no MIG
# mode change, no instance creation, no reset, no clocks). Target: under five minutes.
#
#   scripts/gpu-check.sh            full check: install, inventory, isolation report, NVML
#                                   discovery + sampling cost, nvidia-smi -L, then (when
#                                   `batchd serve` exists) a dev daemon with gpus = "nvml",
#                                   one job per visible GPU / MIG device printing
#                                   `nvidia-smi -L` as the job sees it, one shared (shard)
#                                   job, one utilisation sample while they run, a summary
#   scripts/gpu-check.sh --quick    everything but the daemon and jobs
#
# Install: a venv in $WORK (with --system-site-packages so that a machine's own torch,
# pynvml, click ... are reused). With ./.wheels present (scripts/make-wheelhouse.sh) it
# installs offline from there; else `pip install -e .` from the index; if that fails, the
# project alone (--no-deps --no-build-isolation) so that discovery still runs.
# Env: PYTHON (default python3), WORK (default a new temp dir), OUT (where results go; default
# $WORK/out; when OUT is given, its contents are summary.txt and gpu-check-results.tgz with
# every log, so that at most a few files come back from a remote machine),
# JOB_SECONDS (busy time per job, default 8).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
MODE=full
[ "${1:-}" = "--quick" ] && MODE=quick
PYTHON=${PYTHON:-python3}
WORK=${WORK:-$(mktemp -d /tmp/batchd-gpucheck.XXXXXX)}
FINAL=${OUT:-}
OUT="$WORK/out"
JOB_SECONDS=${JOB_SECONDS:-8}
mkdir -p "$WORK" "$OUT"
T0=$(date +%s)
declare -a SUMMARY=()
note() { SUMMARY+=("$1"); echo "== $1"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
finish() {   # finish RC: print the summary, pack the logs into $FINAL, exit RC
    printf '%s\n' "== SUMMARY" "${SUMMARY[@]}" "total $(elapsed) s" | tee "$OUT/summary.txt"
    if [ -n "$FINAL" ]; then
        mkdir -p "$FINAL" && cp "$OUT/summary.txt" "$FINAL/" \
            && tar czf "$FINAL/gpu-check-results.tgz" -C "$OUT" .
    fi
    exit "$1"
}

echo "== batchd gpu-check ($MODE) repo=$REPO work=$WORK out=$OUT"
"$PYTHON" - <<'EOF' || { echo "need Python >= 3.11"; exit 2; }
import sys; print("python", sys.version.split()[0], sys.executable); assert sys.version_info >= (3, 11)
EOF

# ---- 1. install ---------------------------------------------------------------------------
t=$(date +%s)
PY="$WORK/venv/bin/python"
PIP=("$PY" -m pip)
# ensurepip is often missing (Debian/Ubuntu without python3-venv): then a venv without pip,
# driven by the calling python's pip (--python needs pip >= 22.3)
if [ -n "${VENV_WITHOUT_PIP:-}" ] || ! "$PYTHON" -m venv --system-site-packages "$WORK/venv" >"$OUT/venv.log" 2>&1; then
    rm -rf "$WORK/venv"
    "$PYTHON" -m venv --without-pip --system-site-packages "$WORK/venv" >>"$OUT/venv.log" 2>&1 \
        || { cat "$OUT/venv.log"; note "venv: FAILED"; finish 2; }
    PIP=("$PYTHON" -m pip --python "$PY")
fi
# a venv made from a venv's python sees the BASE interpreter's site-packages only: make the
# calling environment's packages (torch, pynvml, click ... on a GPU image) visible behind
# the venv's own ones with a .pth file
"$PYTHON" -c "import site; print('\n'.join(site.getsitepackages()))" \
    >"$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_batchd_parent_env.pth"
INSTALL=none
if [ -d .wheels ]; then
    "${PIP[@]}" install -q --no-index --find-links .wheels -e . \
        >"$OUT/install.log" 2>&1 && INSTALL="wheelhouse"
fi
if [ "$INSTALL" = none ] && [ ! -d .wheels ]; then
    timeout 180 "${PIP[@]}" install -q --retries 0 --timeout 10 -e . >"$OUT/install.log" 2>&1 \
        && INSTALL="index"
fi
if [ "$INSTALL" = none ]; then
    "${PIP[@]}" install -q --no-deps --no-build-isolation -e . >>"$OUT/install.log" 2>&1 \
        && INSTALL="project only (--no-deps): the daemon's dependencies may be missing"
fi
note "install: $INSTALL in $(( $(date +%s) - t )) s"
[ "$INSTALL" = none ] && { tail -20 "$OUT/install.log"; finish 2; }
BATCHD="$WORK/venv/bin/batchd"
export PATH="$WORK/venv/bin:$PATH"

# ---- 2. inventory and isolation -----------------------------------------------------------
if "$BATCHD" node inventory --json >"$OUT/inventory.json" 2>"$OUT/inventory.err"; then
    NGPU=$("$PY" -c "import json,sys; print(len(json.load(open(sys.argv[1]))['nodes'][0]['gpus']))" "$OUT/inventory.json")
    note "batchd node inventory --json: $NGPU GPU(s)"
else
    NGPU=0; note "batchd node inventory --json: FAILED (see inventory.err)"
fi
"$BATCHD" node inventory 2>&1 | tee "$OUT/inventory.txt"
"$BATCHD" node check 2>&1 | tee "$OUT/check.txt"
note "batchd node check: $(head -1 "$OUT/check.txt")"

# ---- 3. discovery + sampling cost (Python, read-only) --------------------------------------
cat >"$WORK/busy.py" <<'EOF'
"""Keep the visible GPU(s) busy for N seconds (torch if present, else sleep); touch the file
named by argv[2] (if any) once the GPU is in use."""
import sys, time
n = float(sys.argv[1]) if len(sys.argv) > 1 else 8
ready = sys.argv[2] if len(sys.argv) > 2 else None
try:
    import torch
    assert torch.cuda.is_available()
    x = torch.randn(4096, 4096, device="cuda")
    y = x @ x
    torch.cuda.synchronize()
    print("busy on", torch.cuda.get_device_name(0), "device_count", torch.cuda.device_count(), flush=True)
    if ready:
        open(ready, "w").close()
    t = time.time()
    while time.time() - t < n:
        for _ in range(20):
            y = x @ x
        torch.cuda.synchronize()
except Exception as e:
    print("no torch/CUDA busy loop:", type(e).__name__, e, flush=True)
    if ready:
        open(ready, "w").close()
    time.sleep(n)
EOF
"$PYTHON" "$WORK/busy.py" "$JOB_SECONDS" "$WORK/busy.ready" >"$OUT/busy.log" 2>&1 &
BUSY=$!
for _ in $(seq 60); do [ -e "$WORK/busy.ready" ] && break; kill -0 "$BUSY" 2>/dev/null || break; sleep 0.5; done
sleep 1   # let NVML take a utilisation sample of the busy GPU
"$PY" - "$BUSY" >"$OUT/probe.txt" 2>&1 <<'EOF'
import json, statistics, sys, time
import pynvml
from batchd import nvml as bn, gpusample
busy_pid = int(sys.argv[1])
t = time.perf_counter(); inv = bn.discover(); t_disc = (time.perf_counter() - t) * 1000
print(f"discover: {len(inv.gpus)} GPU(s) in {t_disc:.0f} ms, driver {inv.driver}, reason {inv.reason}")
for g in inv.gpus:
    print(f"  gpu {g.index} {g.name} type={g.type} slurm_type={g.slurm_type} mem={g.memory_mb}MiB "
          f"bus={g.pci_bus_id} numa={g.numa} cpus={len(g.cpus)} mig={g.mig_mode} migs={[m.profile for m in g.mig]}")
print("snapshot gpus:", json.dumps(inv.to_snapshot_gpus())[:600])
print("errors:", inv.errors)
if not inv.gpus:
    sys.exit(0)
uuids = [g.uuid for g in inv.gpus if not g.mig_mode] + [m.uuid for g in inv.gpus for m in g.mig]
s = gpusample.GpuSampler()
print("sample (device level):", json.dumps(s.sample(uuids, None)))
import psutil
pids = {busy_pid} | {c.pid for c in psutil.Process(busy_pid).children(recursive=True)}
print("sample (per process, job pids", sorted(pids), "):", json.dumps(s.sample(uuids, pids)))
for label, p in (("device-level", None), ("per-process", pids)):
    costs = []
    for _ in range(50):
        costs.append(s.sample(uuids, p)["cost_ms"])
    print(f"sample cost {label} over {len(uuids)} device(s), 50 calls: min {min(costs):.3f} "
          f"median {statistics.median(costs):.3f} max {max(costs):.3f} ms")
s.close()
# CUDA_VISIBLE_DEVICES forms as CUDA (libcuda, no framework) sees them
import subprocess
probe = ("import ctypes; c = ctypes.CDLL('libcuda.so.1'); n = ctypes.c_int(); r = c.cuInit(0); "
         "r = r or c.cuDeviceGetCount(ctypes.byref(n)); print(r, n.value)")
g0 = inv.gpus[0]
forms = {"0": "0", "GPU uuid": g0.uuid, "uuid prefix": g0.uuid[:12], "empty": "", "-1,0": "-1,0"}
if len(inv.gpus) > 1:
    forms["1,0"] = "1,0"
for m in (g0.mig or [])[:2]:
    forms[f"MIG {m.profile}"] = m.uuid
if len(g0.mig) > 1:
    forms["two MIG uuids"] = f"{g0.mig[0].uuid},{g0.mig[1].uuid}"
import os
for label, cvd in forms.items():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=cvd)
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    rc, _, n = (r.stdout.strip() or "? ?").partition(" ")
    err = f" ({r.stderr.strip().splitlines()[-1]})" if r.returncode and r.stderr.strip() else ""
    print(f"CUDA_VISIBLE_DEVICES={cvd!r} ({label}): cuInit/cuDeviceGetCount rc={rc} devices={n}{err}")
EOF
cat "$OUT/probe.txt"
note "discovery/sampling probe: $(grep -m1 '^discover:' "$OUT/probe.txt" || echo FAILED); $(grep -m1 'cost per-process' "$OUT/probe.txt" | sed 's/.*50 calls: //')"
wait "$BUSY" 2>/dev/null
echo "== nvidia-smi -L (host)"
nvidia-smi -L 2>&1 | tee "$OUT/nvidia-smi-L.txt" || true

if [ "$MODE" = quick ]; then
    note "quick mode: daemon and jobs skipped"
    finish 0
fi

# ---- 4. dev daemon with gpus = "nvml", one job per GPU, one shared job ---------------------
if ! "$BATCHD" serve --help >/dev/null 2>&1; then
    note "daemon: SKIPPED: 'batchd serve' does not exist in this tree yet"
    finish 0
fi
RUN="$WORK/run"; mkdir -p "$RUN"
HOST=$(hostname -s 2>/dev/null || hostname)
MEM_MB=$(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo)
cat >"$RUN/batchd.toml" <<EOF
cluster_name = "gpucheck"
shard_per_gpu = 4

[accounting]
sample_interval_s = 2

[scheduler]
def_mem_per_cpu_mb = 8000

[[partition]]
name = "gpu"
nodes = "ALL"
default = true

[[node]]
name = "$HOST"
cpus = $(nproc)
memory_mb = $MEM_MB
gpus = "nvml"
EOF
cp "$WORK/busy.py" "$RUN/busy.py"
cd "$RUN"
export BATCHD_CONFIG="$RUN/batchd.toml" BATCHD_SOCKET="$RUN/.batchd/batchd.sock"
"$BATCHD" serve --dev >"$OUT/daemon.log" 2>&1 &
DAEMON=$!
for _ in $(seq 60); do
    [ -S "$BATCHD_SOCKET" ] && break
    kill -0 "$DAEMON" 2>/dev/null || break      # it died: no point in waiting
    sleep 0.5
done
if [ ! -S "$BATCHD_SOCKET" ]; then
    note "daemon: FAILED to start (see daemon.log)"; tail -20 "$OUT/daemon.log"
    kill "$DAEMON" 2>/dev/null
    cd "$REPO"; finish 1
fi
note "daemon: up (pid $DAEMON)"
JOBSCRIPT='echo "job $SLURM_JOB_ID CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES SLURM_JOB_GPUS=$SLURM_JOB_GPUS"; nvidia-smi -L; "'"$(command -v "$PYTHON")"'" busy.py '"$JOB_SECONDS"
# one job per whole GPU by type, one per MIG device by profile
GRES=$("$PY" - "$OUT/inventory.json" <<'EOF'
import json, sys
n = json.load(open(sys.argv[1]))["nodes"][0]
for g in n["snapshot_gpus"]:
    if g["mig"]:
        for m in g["mig"]:
            print(f"gpu:{m['profile']}:1")
    else:
        print(f"gpu:{g['type']}:1")
EOF
)
JOBS=()
for gres in $GRES; do
    j=$(sbatch --parsable --gres="$gres" -o "job-%j.out" --wrap "$JOBSCRIPT" 2>&1) && JOBS+=("$j") \
        || note "sbatch --gres=$gres: FAILED: $j"
done
j=$(sbatch --parsable --gres=shard:1 -o "job-%j.out" --wrap "$JOBSCRIPT" 2>&1) && JOBS+=("$j") \
    || note "sbatch --gres=shard:1 (shared job): FAILED: $j"
note "submitted ${#JOBS[@]} job(s): ${JOBS[*]:-none}"
sleep 5
squeue 2>&1 | tee "$OUT/squeue.txt"
"$PY" - >"$OUT/sample-jobs.txt" 2>&1 <<'EOF'
import json
from batchd import nvml as bn, gpusample
inv = bn.discover()
uuids = [g.uuid for g in inv.gpus if not g.mig_mode] + [m.uuid for g in inv.gpus for m in g.mig]
s = gpusample.GpuSampler()
import pynvml
pids = set()
for u in uuids:
    try:
        pids |= {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByUUID(u))}
    except pynvml.NVMLError:
        pass
print(json.dumps(s.sample(uuids, pids), indent=1))
EOF
note "utilisation sample while jobs run: $(grep -c '"util_pct"' "$OUT/sample-jobs.txt") device(s) sampled"
for _ in $(seq $(( 2 * JOB_SECONDS + 60 ))); do
    [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1
done
if [ -n "$(squeue -h 2>/dev/null)" ]; then
    note "jobs still queued after the wait (cancelled): $(squeue -h -o '%i:%T:%r' 2>&1 | tr '\n' ' ')"
    scancel "${JOBS[@]}" 2>/dev/null
fi
for j in "${JOBS[@]}"; do
    echo "== job $j"; cat "job-$j.out" 2>/dev/null || echo "(no output file)"
done | tee "$OUT/jobs.txt"
sacct 2>&1 | tee "$OUT/sacct.txt" | tail -20
# what the node agent itself sampled through NVML while each job ran (batchd eff)
for j in "${JOBS[@]}"; do "$BATCHD" eff "$j" 2>&1; done | tee "$OUT/eff.txt"
note "agent samples: $(grep -ci 'gpu' "$OUT/eff.txt") GPU line(s) in batchd eff"
kill "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null
cd "$REPO"
note "jobs: $(grep -c 'CUDA_VISIBLE_DEVICES=' "$OUT/jobs.txt") of ${#JOBS[@]} printed their GPUs"
finish 0
