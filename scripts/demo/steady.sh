#!/bin/bash
# A plain 40 s job; the demo takes its node down (node failure) or preempts it.
sleep 40
echo "steady demo: finished on $SLURMD_NODENAME"
