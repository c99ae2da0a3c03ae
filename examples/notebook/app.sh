#!/bin/sh
# Start a web app (JupyterLab by default) on the GPU node this job runs on, and print the
# one line a user needs to reach it. Run it as a batch job (examples/notebook/submit.sh)
# or in the foreground: srun -q interactive --gres=gpu:1 --pty examples/notebook/app.sh
#
# NOTEBOOK_APP: the command to start, with {port} where the port goes (and {token}, the
# access token it should require). Default:
#   jupyter lab --no-browser --ip=0.0.0.0 --port={port} --IdentityProvider.token={token}
# NOTEBOOK_LOGIN: the host users ssh to (default: the host the job was submitted from).
set -eu
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
host=$(hostname)
login=${NOTEBOOK_LOGIN:-${SLURM_SUBMIT_HOST:-$host}}
app=${NOTEBOOK_APP:-'jupyter lab --no-browser --ip=0.0.0.0 --port={port} --IdentityProvider.token={token}'}
case $app in
    *"{token}"*) query="/?token=$token" ;;
    *) query="/" ;;
esac
cmd=$(printf '%s' "$app" | sed -e "s/{port}/$port/g" -e "s/{token}/$token/g")
echo "notebook: job ${SLURM_JOB_ID:-?} on $host:$port (GPUs ${CUDA_VISIBLE_DEVICES:-none}); reach it with: ssh -N -L $port:$host:$port ${USER:-$(id -un)}@$login, then open http://localhost:$port$query (on the cluster network: http://$host:$port$query)"
# the app's own output after the line; exec: scancel and the time limit reach it directly
exec $cmd
