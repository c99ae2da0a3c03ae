"""sbatch's `--usage` and man-style `--help` texts (imported only when asked for)."""

USAGE = """Usage: sbatch [-N nnodes] [-n ntasks] [-c ncpus] [-t time] [-p partition] [-A account]
              [-J jobname] [-o out] [-e err] [-D dir] [--gres=list] [--gpus=n] [--mem=MB]
              [--array=indexes] [--dependency=type:jobid] [--export=names] [--wrap=cmd]
              [--parsable] [-W] [--test-only] executable [args...]
"""
HELP = USAGE + """
Submit a batch script to batchd (Slurm-compatible).

Parallel run options:
  -A, --account=name          charge job to specified account
  -a, --array=indexes         job array index values (0-7, 1,3,5, 0-15:4, %N throttle)
  -b, --begin=time            defer job until HH:MM MM/DD/YY, now+N[units], today, tomorrow
      --comment=name          arbitrary comment
  -c, --cpus-per-task=ncpus   number of cpus required per task
  -C, --constraint=list       specify a list of constraints
  -d, --dependency=type:jobid[:time] defer job until condition on jobid is satisfied
                              (after, afterany, afterok, afternotok, aftercorr, singleton;
                              ',' all, '?' any)
  -D, --chdir=directory       set working directory for batch script
  -e, --error=err             file for batch script's standard error
      --exclusive             allocate nodes in exclusive mode
  -x, --exclude=hosts         never run on these hosts (host list, e.g. gpu[01-02])
  -w, --nodelist=hosts        run only on these hosts (host list)
      --reservation=name      refused as Slurm refuses an unknown one (batchd has no reservations)
  -v, --verbose               verbose mode (accepted; sbatch prints nothing more)
      --export[=names]        specify environment variables to export (ALL, NONE, NIL,
                              VAR=val lists, ALL,VAR=val)
      --export-file=file      specify environment variables file to export
      --gid=group_id          group ID to run job as (user root only)
      --gres=list             required generic resources per node (gpu:2, gpu:h200:2,
                              gpu:1g.24gb:1, shard:8)
  -H, --hold                  submit job in held state
  -M, --clusters=names        accepted for compatibility (batchd is one cluster)
  -i, --input=in              file for batch script's standard input
  -J, --job-name=jobname      name of job
  -L, --licenses=names        refused as Slurm refuses an unknown one (batchd has no licenses)
      --mail-type=type        accepted with a warning, no mail is sent
      --mail-user=user        accepted with a warning, no mail is sent
      --container=path        accepted with a warning (batchd runs no OCI containers)
  -n, --ntasks=ntasks         number of tasks to run
      --nice[=value]          decrease scheduling priority by value (default 100)
      --no-requeue            if set, do not permit the job to be requeued
      --ntasks-per-node=n     number of tasks to invoke on each node
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
      --open-mode=mode        append or truncate the output/error files
  -o, --output=out            file for batch script's standard output (%j %J %x %u %A
                              %a %N %n %s %t %% and zero padding such as %3a)
      --parsable              outputs only the jobid and cluster name (if present),
                              separated by semicolon, only on successful submission.
  -p, --partition=partition   partition requested
  -q, --qos=qos               quality of service
  -Q, --quiet                 quiet mode (suppress informational messages)
      --requeue               if set, permit the job to be requeued
      --signal=[R|B:]num[@time] send signal when time limit within time seconds
  -t, --time=minutes          time limit (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, UNLIMITED)
      --time-min=minutes      minimum time limit (if distinct)
      --test-only             report when and where the job would start, submit nothing
      --uid=user_id           user ID to run job as (user root only)
  -W, --wait                  wait for completion of submitted job, exit with its code
      --wrap[=command string] wrap command string in a sh script and submit

Consumable resources related options:
      --mem=MB                minimum amount of real memory per node (K|M|G|T suffix)
      --mem-per-cpu=MB        maximum amount of real memory per allocated cpu
      --mem-per-gpu=MB        real memory required per allocated GPU
      --cpus-per-gpu=n        number of CPUs required per allocated GPU
  -G, --gpus=n                count of GPUs required for the job ([type:]n)
      --gpus-per-node=n       number of GPUs required per allocated node
      --gpus-per-task=n       number of GPUs required per spawned task

Help options:
  -h, --help                  show this help message
      --usage                 display brief usage message
  -V, --version               output version information and exit

Input variables SBATCH_ACCOUNT, SBATCH_PARTITION, SBATCH_TIMELIMIT, SBATCH_JOB_NAME,
SBATCH_GRES, SBATCH_GPUS, SBATCH_MEM_PER_NODE, SBATCH_OUTPUT, SBATCH_ERROR, SBATCH_QOS,
SBATCH_EXPORT, ... act as the options; the command line wins over them, and they win
over #SBATCH lines in the script.
"""
