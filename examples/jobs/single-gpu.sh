#!/bin/bash
#SBATCH -J single-gpu
#SBATCH --gres=gpu:1
#SBATCH -c 8
#SBATCH --mem=32G
#SBATCH -t 2:00:00
#SBATCH -o %x-%j.out
# One GPU, 8 CPUs, 32 GiB for two hours. CUDA_VISIBLE_DEVICES names the card batchd gave.
echo "job $SLURM_JOB_ID on $SLURMD_NODENAME, GPU(s): $CUDA_VISIBLE_DEVICES"
nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi here)"
