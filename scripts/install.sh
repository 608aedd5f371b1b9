#!/usr/bin/env bash
# Installs Gregor into .venv with what one use of it needs, and says what it installs:
#
#   scripts/install.sh broker    the package and its runtime dependencies: `gregor serve` and the tools
#                                (no system package)
#   scripts/install.sh cluster   + ZooKeeper and a Java runtime (Debian) and the `cluster` extra (kazoo):
#                                `gregor cluster up`, brokers with zookeeper.connect
#   scripts/install.sh spark     + a Java runtime (Debian) and the `spark` extra (pyspark, pyarrow, pandas, typed codecs):
#                                `gregor pipeline`, gregor.spark
#   scripts/install.sh test      everything the test suite needs: cluster and spark, kcat, strace, openssl,
#                                chromium and the `test` extra
#
# Several may be given (`scripts/install.sh cluster spark`); system packages already there are kept.
# --dry-run prints what would be installed, and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,14s/^# \{0,1\}//p' "$0" >&2; exit 2; }
extras=() apt=() dry_run=0 targets=0
want_apt() { local p; for p in "$@"; do [[ " ${apt[*]-} " == *" $p "* ]] || apt+=("$p"); done; }
want_extra() { local e; for e in "$@"; do [[ " ${extras[*]-} " == *" $e "* ]] || extras+=("$e"); done; }
# Spark and ZooKeeper run on the JVM; 17 is what pyspark 4.3 targets. A Java already on the PATH is used.
java_runtime() { java -version >/dev/null 2>&1 || want_apt openjdk-17-jre-headless; }
zookeeper() { [ -f /usr/share/java/zookeeper.jar ] || want_apt zookeeper; java_runtime; }
for what in "$@"; do
  [[ "$what" == -* ]] || targets=$((targets + 1))
  case "$what" in
    broker) ;;
    cluster) zookeeper; want_extra cluster ;;
    spark) java_runtime; want_extra spark ;;
    test)
      zookeeper; want_extra cluster spark test
      command -v kcat >/dev/null 2>&1 || want_apt kcat  # the kcat client tests
      command -v strace >/dev/null 2>&1 || want_apt strace  # flush.messages=1 fsyncs before the acknowledgement
      command -v openssl >/dev/null 2>&1 || want_apt openssl  # the TLS tests make their certificates with it
      # The web console's tests drive it headless through Playwright (never `playwright install`).
      command -v chromium >/dev/null 2>&1 || want_apt chromium
      ;;
    --dry-run) dry_run=1 ;;
    -h|--help) usage ;;
    *) echo "install.sh: unknown target '$what'" >&2; usage ;;
  esac
done
[ "$targets" -gt 0 ] || usage

spec=.
if [ ${#extras[@]} -gt 0 ]; then
  spec=".[$(IFS=,; echo "${extras[*]}")]"
fi
if [ "$dry_run" = 1 ]; then
  echo "Debian packages: ${apt[*]:-none}"
  echo "Python: pip install -e '$spec'"
  exit 0
fi
if [ ${#apt[@]} -gt 0 ]; then
  echo "install.sh: installing from Debian: ${apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q "${apt[@]}"
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "install.sh: creating the virtualenv .venv"
  # Without a pip of its own when this Python's pip can install into it (pip --python): putting pip into a
  # new venv costs more CPU than all of a broker's dependencies (6 s of the quickstart's 18). Add one
  # with `.venv/bin/python -m ensurepip` if you want it.
  if "$PY" -m pip --python "$("$PY" -c 'import sys; print(sys.executable)')" --version >/dev/null 2>&1; then
    "$PY" -m venv --without-pip .venv
  else
    "$PY" -m venv .venv
  fi
fi
if [ -x .venv/bin/pip ]; then pip=(.venv/bin/pip); else pip=("$PY" -m pip --python .venv/bin/python); fi
echo "install.sh: installing gregor into .venv (pip install -e '$spec')"
# --no-compile: modules are compiled when first imported instead, and most of pyspark's never are.
"${pip[@]}" install -q --no-compile -e "$spec"
