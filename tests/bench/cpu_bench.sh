#!/bin/bash
# CPU per message of a `magnetar standalone` process under `magnetar perf produce` then `perf consume`.
#
# usage: tests/bench/cpu_bench.sh            (from a worktree after `make venv`)
# env:   N=60000 (messages)  PORT=18181  STANDALONE_ARGS=""  PRODUCE_ARGS=""  CONSUME_ARGS=""
#
# Starts a fresh standalone (one disk bookie) in a temporary data dir, publishes N 100-byte messages, reads
# them back from the earliest position, stops the standalone, and prints one line: both wall-clock rates,
# publish latency percentiles and the standalone's CPU time (utime+stime from /proc/<pid>/stat, in clock
# ticks of 10 ms) per message for each phase, the perf clients' CPU per message (their run minus the CPU of
# starting the command), with the load average before and after. On a shared machine
# the CPU figure is the steady one: wall-clock rates swing with the neighbours' load.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
N=${N:-60000}
PORT=${PORT:-18181}
D=$(mktemp -d /tmp/magnetar-cpu-bench.XXXXXX)
.venv/bin/magnetar --log-level WARNING standalone --data-dir "$D/data" --http-port "$PORT" \
    --bookie-port $((PORT + 1000)) ${STANDALONE_ARGS:-} > "$D/out" 2> "$D/err" &
SA=$!
trap 'kill -INT $SA 2>/dev/null || true; wait $SA 2>/dev/null || true; rm -rf "$D"' EXIT
for _ in $(seq 200); do grep -q ready "$D/out" 2>/dev/null && break; sleep 0.1; done
cpu() { awk '{print $14+$15}' "/proc/$SA/stat"; }
/usr/bin/time -f "%U %S" -o "$D/startup.time" .venv/bin/magnetar perf produce --help > /dev/null
load0=$(cut -d' ' -f1-3 /proc/loadavg)
c0=$(cpu)
/usr/bin/time -f "%U %S" -o "$D/produce.time" .venv/bin/magnetar perf produce --url "ws://127.0.0.1:$PORT" --topic public/default/bench --messages "$N" \
    --size 100 ${PRODUCE_ARGS:-} 2>&1 | tail -1 > "$D/produce.json"
c1=$(cpu)
/usr/bin/time -f "%U %S" -o "$D/consume.time" .venv/bin/magnetar perf consume --url "ws://127.0.0.1:$PORT" --topic public/default/bench --messages "$N" \
    --initial-position Earliest ${CONSUME_ARGS:-} 2>&1 | tail -1 > "$D/consume.json"
c2=$(cpu)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
.venv/bin/python - "$D" "$c0" "$c1" "$c2" "$N" "$load0" "$load1" <<'PY'
import json, sys
d = sys.argv[1]
p = json.load(open(f"{d}/produce.json"))
c = json.load(open(f"{d}/consume.json"))
c0, c1, c2, n = (float(v) for v in sys.argv[2:6])
pu, ps = (float(v) for v in open(f"{d}/produce.time").read().split())
cu, cs = (float(v) for v in open(f"{d}/consume.time").read().split())
su, ss = (float(v) for v in open(f"{d}/startup.time").read().split())
print(
    f"produce {p['rate_msg_s']:.0f} msg/s p50 {p['latency_ms']['p50']} ms p99 {p['latency_ms']['p99']} ms"
    f" | consume {c['rate_msg_s']:.0f} msg/s"
    f" | standalone CPU/msg: produce {(c1 - c0) * 1e4 / n:.1f} us, consume {(c2 - c1) * 1e4 / n:.1f} us"
    f" | client CPU/msg: produce {(pu + ps - su - ss) * 1e6 / n:.1f} us,"
    f" consume {(cu + cs - su - ss) * 1e6 / n:.1f} us"
    f" | load {sys.argv[6]} -> {sys.argv[7]}"
)
PY
