#!/bin/sh
# A stand-in for an AI agent: reads the daemon's prompt on stdin, picks the first chain
# in it, and resolves it with supervisorctl (whose config comes from the daemon in
# SLURM_SUPERVISOR_CONFIG). Usage: fake-agent.sh SUPERVISORCTL CONFIDENCE
ctl=$1
confidence=$2
chain=$(grep -o '"id": "c[0-9]*"' | head -n 1 | grep -o 'c[0-9]*')
[ -n "$chain" ] || { echo "no chain in the prompt" >&2; exit 1; }
"$ctl" classify "$chain" --action retry --dry-run --reason "fake agent: looks transient" >/dev/null || exit 1
"$ctl" classify "$chain" --action retry --mem 1G --confidence "$confidence" --reason "fake agent: looks transient"
