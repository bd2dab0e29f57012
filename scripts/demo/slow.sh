#!/bin/bash
# Runs 75 s; submitted with --time=1, so the first attempt hits its time limit.
sleep 75
echo "timeout demo: finished in time"
