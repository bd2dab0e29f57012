#!/bin/bash
#SSV --continue --progress=demo-ckpt
# Needs 90 s of work and saves it every 2 s; submitted with --time=1, so each attempt
# gets 60 s: the supervisor continues it from its checkpoint (docs/continuation.md).
n=$(cat demo-ckpt 2>/dev/null || echo 0)
trap 'echo "warned at $n s of work (the checkpoint is saved as it goes)"' USR1
while [ "$n" -lt 90 ]; do
  sleep 2 & wait $!
  n=$((n + 2)); echo "$n" > demo-ckpt.tmp && mv demo-ckpt.tmp demo-ckpt
done
echo "checkpoint demo: done after $n s of work"
