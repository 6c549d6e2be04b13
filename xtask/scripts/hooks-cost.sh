#!/bin/sh
# What contention mode's two ways of seeing futex waits cost, on another kernel:
#
#   cargo xtask vm --script xtask/scripts/hooks-cost.sh [--kernel 6.1]
#
# In each guest, interleaved rounds of: nothing traced; rtm-trace on the scheduler's
# tracepoints (RTM_TRACE_HOOKS=sched); rtm-trace on the kernel's futex functions
# (fentry/fexit, the default where the kernel allows it). Measured: a pipe round trip
# between two processes rtm-trace does not trace (while it traces a sleeping process),
# and the throughput of three shapes launched under it (yield in the critical section,
# a futex ping-pong, a request loop), each by the program's own clock. The guests' CPUs
# are emulated (TCG) unless KVM works: compare ratios within one guest, not absolute
# figures across machines.
set -u
# The release binary, which `cargo xtask vm --script` builds first.
BIN=$PWD/target/release/rtm-trace
OUT=$(ls -td target/debug/build/rtm-tests-*/out | head -1)
SCRATCH=/run/vm/scratch
ROUNDS=${ROUNDS:-3}
cc -O2 -o "$SCRATCH/bench_switch" tests/workloads/bench_switch.c || exit 1
uname -r

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }

# $1: sched | fn | none; then the command: its output's figure $FIELD.
with_tracer_on_sleeper() {
    how=$1
    shift
    if [ "$how" = none ]; then
        "$@"
        return
    fi
    sleep 600 &
    sleeper=$!
    if [ "$how" = sched ]; then
        RTM_TRACE_HOOKS=sched "$BIN" -v -p "$sleeper" -o /dev/null 2>"$SCRATCH/tracer.log" &
    else
        "$BIN" -v -p "$sleeper" -o /dev/null 2>"$SCRATCH/tracer.log" &
    fi
    tracer=$!
    # Loading the programs takes seconds on emulated CPUs.
    i=0
    while [ $i -lt 120 ] && ! grep -q "attached to PID" "$SCRATCH/tracer.log" 2>/dev/null; do
        sleep 0.5
        i=$((i + 1))
    done
    sleep 2
    "$@"
    kill -INT "$tracer"
    wait "$tracer"
    kill "$sleeper"
    wait "$sleeper" 2>/dev/null
}

launched() {
    how=$1
    shift
    case $how in
    none) "$@" ;;
    sched) RTM_TRACE_HOOKS=sched "$BIN" -o /dev/null -- "$@" 2>/dev/null ;;
    fn) "$BIN" -o /dev/null -- "$@" 2>/dev/null ;;
    esac
}

r=1
while [ $r -le "$ROUNDS" ]; do
    for how in none sched fn; do
        v=$(with_tracer_on_sleeper $how "$SCRATCH/bench_switch" 3000 | field ns_per_round_trip)
        echo "round $r pipe_round_trip_ns $how $v"
        if [ "$r" = 1 ] && [ "$how" != none ]; then
            echo "$how: $(grep -i "futex calls seen" "$SCRATCH/tracer.log" | head -1)"
        fi
        v=$(launched $how "$OUT/bench_shapes" yield 8 4 3 | field ops_per_s)
        echo "round $r yield_ops_per_s $how $v"
        v=$(launched $how "$OUT/bench_shapes" pingpong 3 | field ops_per_s)
        echo "round $r pingpong_ops_per_s $how $v"
        v=$(launched $how "$OUT/bench_shapes" serve 4 3 | field ops_per_s)
        echo "round $r serve_ops_per_s $how $v"
    done
    r=$((r + 1))
done
