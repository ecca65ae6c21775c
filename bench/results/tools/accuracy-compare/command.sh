#!/bin/sh
# the run that wrote this folder (2026-12-07 07:01-07:38 UTC; load average 17-39 on 2 cores)
OUT=bench/results/tools/accuracy-compare
mkdir -p "$OUT"
timeout -s TERM 2700 appliance bench tools \
  --spawn appliance --compare raw-vllm-unconstrained --suite accuracy-mini \
  --concurrency 4 --repeat 1 --temperature 0 --timeout 300 --output "$OUT"
echo "rc=$?"
