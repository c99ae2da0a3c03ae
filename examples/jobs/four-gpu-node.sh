#!/bin/bash
#SBATCH -J four-gpu
#SBATCH -N 1
#SBATCH --gres=gpu:rtxpro6000:4
#SBATCH --ntasks-per-node=1
#SBATCH -c 32
#SBATCH --mem=256G
#SBATCH -t 1-00:00:00
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH -o %x-%j.out
# All four cards of one node for a day. Five minutes before the time limit (or when the
# job is preempted) the batch shell gets SIGUSR1: save a checkpoint; a requeued run sees
# SLURM_RESTART_COUNT > 0 and resumes from it.
trap 'echo "checkpoint requested"; touch checkpoint.flag' USR1
echo "restart ${SLURM_RESTART_COUNT:-0}, GPUs $CUDA_VISIBLE_DEVICES"
python3 -c 'import time; time.sleep(5)' &
wait
