#!/usr/bin/env bash
# Install Gregor (the broker and its Python dependencies only: no system package, no Java, no
# ZooKeeper), start a broker on 127.0.0.1:9092, produce and consume a first message, then keep the
# broker running in the foreground (Ctrl-C stops it cleanly). Clusters and Spark pipelines need more:
# scripts/install.sh cluster|spark installs it.
set -euo pipefail
cd "$(dirname "$0")"
fail() { echo "quickstart: $*" >&2; exit 1; }
# Before installing anything: the broker needs port 9092 (a broker already running holds it).
if (echo > /dev/tcp/127.0.0.1/9092) 2>/dev/null; then
  fail "port 9092 is already in use (a broker already running? stop it, or see who holds it: ss -ltnp 'sport = :9092')"
fi
bash scripts/install.sh broker
. .venv/bin/activate
gregor serve --override log.dirs=./gregor-data &
broker=$!
trap 'kill -TERM $broker 2>/dev/null; wait $broker' INT TERM
up=0
for _ in $(seq 1 150); do
  kill -0 "$broker" 2>/dev/null || fail "the broker exited during start (its log is above)"
  if (echo > /dev/tcp/127.0.0.1/9092) 2>/dev/null; then up=1; break; fi
  sleep 0.1
done
[ "$up" = 1 ] || { kill -TERM "$broker" 2>/dev/null; fail "the broker did not listen on 127.0.0.1:9092 within 15 s"; }
gregor topics --create --if-not-exists --topic quickstart --partitions 3
printf 'hello:Gregor\nworld:says hello\n' | gregor produce quickstart --key-separator :
gregor consume quickstart --print-key --max-messages 2
echo "Broker running on 127.0.0.1:9092 (pid $broker). Ctrl-C to stop."
wait $broker
