#!/usr/bin/env bash
# Install Gregor, start a broker on 127.0.0.1:9092, produce and consume a first message,
# then keep the broker running in the foreground (Ctrl-C stops it cleanly).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/install.sh
. .venv/bin/activate
gregor serve --override log.dirs=./gregor-data &
broker=$!
trap 'kill -TERM $broker 2>/dev/null; wait $broker' INT TERM
for _ in $(seq 1 100); do
  (echo > /dev/tcp/127.0.0.1/9092) 2>/dev/null && break
  sleep 0.1
done
gregor topics --create --topic quickstart --partitions 3 || true
printf 'hello:Gregor\nworld:says hello\n' | gregor produce quickstart --key-separator :
gregor consume quickstart --from-beginning --print-key --max-messages 2
echo "Broker running on 127.0.0.1:9092 (pid $broker). Ctrl-C to stop."
wait $broker
