#!/bin/sh
# A stand-in for an AI agent: takes the daemon's prompt on stdin, picks the first chain
# that waits for an agent, and resolves it with supervisorctl (whose config comes from the daemon in
# SLURM_SUPERVISOR_CONFIG). Usage: fake-agent.sh SUPERVISORCTL CONFIDENCE
ctl=$1
confidence=$2
# The prompt names the chains; the agent asks for them as JSON, read by a JSON parser.
cat > /dev/null
chain=$("$ctl" pending --json | python3 -c 'import json, sys; print(next((c["id"] for c in json.load(sys.stdin) if not c["held"]), ""))')
[ -n "$chain" ] || { echo "no chain waits for an agent" >&2; exit 1; }
"$ctl" classify "$chain" --action retry --dry-run --reason "fake agent: looks transient" >/dev/null || exit 1
"$ctl" classify "$chain" --action retry --mem 1G --confidence "$confidence" --reason "fake agent: looks transient"
