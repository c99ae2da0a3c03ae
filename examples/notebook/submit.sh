#!/bin/sh
# Submit examples/notebook/app.sh as a batch job and print the one line to reach the app
# once it runs. sbatch's options pass through (default: -q interactive --gres=gpu:1 -t 8:00:00):
#   examples/notebook/submit.sh                       # JupyterLab on one GPU
#   examples/notebook/submit.sh --gres=gpu:h200:2 -t 2:00:00
# The job's output (the line, then the app's log) is notebook-<job id>.out here;
# end it with scancel <job id>.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -eq 0 ]; then
    set -- -q interactive --gres=gpu:1 -t 8:00:00
fi
job=$(sbatch --parsable -J notebook -o "notebook-%j.out" "$@" "$here/app.sh")
job=${job%%;*}
echo "submitted job $job; waiting for it to start (scancel $job to give up)" >&2
while :; do
    state=$(squeue -h -j "$job" -o %T 2>/dev/null || true)
    case $state in
        ""|COMPLETED|FAILED|CANCELLED|TIMEOUT|PREEMPTED|NODE_FAIL|OUT_OF_MEMORY)
            if [ -f "notebook-$job.out" ] && grep -q '^notebook: ' "notebook-$job.out"; then
                break
            fi
            echo "job $job ended (${state:-gone}) before the app started; see notebook-$job.out" >&2
            exit 1 ;;
    esac
    if [ -f "notebook-$job.out" ] && grep -q '^notebook: ' "notebook-$job.out"; then
        break
    fi
    sleep 1
done
grep -m1 '^notebook: ' "notebook-$job.out"
