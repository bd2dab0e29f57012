#!/bin/bash
# Needs about 150 MiB; submitted with --mem=100M, so the first attempt is killed for memory.
python3 -c 'x = b"a" * (150 * 1024 * 1024); import time; time.sleep(4)'
echo "oom demo: done with enough memory"
