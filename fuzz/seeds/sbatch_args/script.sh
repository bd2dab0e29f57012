#!/bin/bash
#SBATCH --job-name="a b" -t 10 # c
#SBATCH --mem-per-cpu=1G
#SBATCH --array=0-15:4%2

echo hi
