#!/bin/bash
# Needs about 150 MiB; submitted with --mem=100M, so the first attempt is killed for memory.
# Slurm samples a job's memory every second (JobAcctGatherFrequency=1 on the dev clusters):
# with less than 200M the memory is held until the kill comes, at most 2 minutes; with the
# retry's memory the job is done after a few seconds.
python3 - <<'PY'
import os, sys, time
x = b"a" * (150 * 1024 * 1024)
mem = int(os.environ.get("SLURM_MEM_PER_NODE", "0") or 0)
if mem >= 200:
    time.sleep(4)
else:
    time.sleep(120)
    sys.exit("oom demo: not killed for memory within 2 minutes")
PY
echo "oom demo: done with enough memory"
