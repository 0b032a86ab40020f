#!/usr/bin/env bash
# Runs the guarded-calculator workload on superego (bench/guarded_calculator)
# and on CloudWeGo Eino (bench/peers/eino, its own module, so that Eino never
# enters superego's go.mod), in rounds that alternate which goes first, and
# prints the two side by side: medians of the rounds, their range, and the
# ratio of each round's pair.
#
#   bash bench/peers/run_all.sh                # 3 rounds, 1,000 and 10,000 at once
#   ROUNDS=5 bash bench/peers/run_all.sh
#   BENCH_ARGS="-conc-big 0" bash bench/peers/run_all.sh
#
# Run it from the repository's root. CONSTITUTION is the workload's
# constitution (default bench/guarded_calculator/constitution.txt, the shared fixture).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
constitution=${CONSTITUTION:-bench/guarded_calculator/constitution.txt}
args=${BENCH_ARGS:-"-conc-big 10000 -sample 5ms"}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/superego" ./bench/guarded_calculator
go build -o "$bin/compare" ./bench/peers/compare
(cd bench/peers/eino && go build -o "$bin/eino" .)
"$bin/compare" -rounds "$rounds" -args "-constitution $constitution $args" "$bin/superego" "$bin/eino"
