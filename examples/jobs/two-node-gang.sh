#!/bin/bash
#SBATCH -J gang-2x4
#SBATCH -N 2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH -c 8
#SBATCH -t 12:00:00
#SBATCH -o %x-%j.out
# 2 nodes x 4 GPUs, started only when all 8 cards are free at once (gang). The script
# runs on the first node; srun starts one task per GPU on both nodes through their agents,
# the torchrun/MPI way: each task sees SLURM_PROCID (global rank), SLURM_LOCALID and its
# node's GPUs.
echo "nodes: $SLURM_JOB_NODELIST ($SLURM_NNODES)"
srun -l bash -c 'echo "rank $SLURM_PROCID local $SLURM_LOCALID on $SLURMD_NODENAME GPUs $CUDA_VISIBLE_DEVICES"'
