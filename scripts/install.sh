#!/usr/bin/env bash
# Installs what Gregor and its tests need on a fresh Debian machine: system packages
# (kcat for the client tests, strace for the durability tests, zookeeper for clusters, chromium for the console) and a virtualenv in .venv with
# the package and test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
# strace: the durability tests check that flush.messages=1 fsyncs before the acknowledgement.
command -v strace >/dev/null 2>&1 || missing+=(strace)
# openssl: the TLS tests make their certificates with it.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# Spark (the gregor.spark connector and pipeline) needs a Java runtime; 17 is what pyspark 4.3 targets.
java -version >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
# Clusters keep their metadata in Apache ZooKeeper; tests and `gregor cluster up` start their own.
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
# chromium: the web console's tests drive it headless through Playwright (never `playwright install`).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q "${missing[@]}"
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test,spark]'
