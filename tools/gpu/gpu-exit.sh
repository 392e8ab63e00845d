#!/usr/bin/env bash
# The exit suite on the GPU machine (docs/exit.md): every way of ending a process that used
# gdsroute, many times each, with cuFile serving the file (udev record written) and cuFile's
# statistics on (the default). Build first with tools/gpu/gpu-build.sh (where Rust is) and copy .device to the GPU machine.
#   tools/gpu/gpu-exit.sh [BIN_DIR [MODE=COUNT ...]]   (default: 200 returns from main, 50 of each other path)
# Four streams run at once (returns from main; the paths that exit while a start-up runs in the
# background, fork after an open or never use CUDA; exits with stream-ordered calls queued; the
# other paths). Exit status 1 if any run crashed,
# hung, ended with the wrong status or exited more than 1 s after main returned.
set -u
D=${1:-.device}
shift || true
F=${GDSROUTE_EXIT_FILE:-/var/tmp/gdsroute-exit.bin}
[ -f "$F" ] || head -c 256M /dev/urandom > "$F"
bash "$(dirname "$0")/udev-entry.sh" "$F" >/dev/null
export PYTHONUNBUFFERED=1
suite=$(dirname "$0")/../../tests/exit/run_exit_suite.py
if [ $# -gt 0 ]; then
    exec python3 "$suite" "$D" "$F" "$@"
fi
python3 "$suite" "$D" "$F" main-return=200 > /tmp/gdsroute-exit-main.log 2>&1 &
main_pid=$!
python3 "$suite" "$D" "$F" open-then-return=50 open-then-exit=50 begin-then-return=50 fork-after-open=50 \
    host-only=10 > /tmp/gdsroute-exit-start.log 2>&1 &
start_pid=$!
python3 "$suite" "$D" "$F" exit-stream-queued=50 main-return-stream-queued=50 exit-relay-queued=50 main-return-relay-queued=50 > /tmp/gdsroute-exit-stream.log 2>&1 &
stream_pid=$!
python3 "$suite" "$D" "$F" exit-in-flight=50 exit-in-flight-bounce=50 exit-from-thread=50 leak=50 \
    shutdown-then-calls=50 dlopen=50 sigterm=50
other=$?
wait $main_pid
main=$?
wait $start_pid
start=$?
wait $stream_pid
stream=$?
cat /tmp/gdsroute-exit-main.log /tmp/gdsroute-exit-start.log /tmp/gdsroute-exit-stream.log
[ $main -eq 0 ] && [ $other -eq 0 ] && [ $start -eq 0 ] && [ $stream -eq 0 ]
