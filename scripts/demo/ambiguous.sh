#!/bin/bash
# Fails with an error no rule knows: it waits in pending_failed for an agent.
echo "checkpoint shard 3 has an unexpected checksum" >&2
exit 1
