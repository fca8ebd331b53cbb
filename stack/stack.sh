#!/usr/bin/env bash
# stack.sh — start and stop the local PostgreSQL, Apache Kafka (KRaft) and
# Confluent-compatible schema registry (Apicurio Registry) that the demo, the
# tests and the benchmarks run against. No Docker needed: Postgres comes from
# the machine's server binaries, Kafka from jars that Maven resolves from Maven
# Central (stack/pom.xml) and caches in ~/.m2, the registry from its Maven
# Central distribution (stack/registry.sh; it needs Java 21+).
#
#   stack/stack.sh up|down|status|logs|env [pg|kafka|registry|cdc]   (default: all: the first three)
#   stack/stack.sh running [pg|kafka|registry|cdc]   exit 0 when every named service is up, 1 if not (no output)
#
# `up` starts PostgreSQL, Kafka, then the registry; `down` stops them in the
# reverse order. `cdc` is a change-data-capture source (stack/cdc.sh): a
# PostgreSQL with logical replication and Kafka Connect with Debezium, against
# the stack's Kafka. It is not part of `all`: `up cdc` and `down cdc` alone
# start and stop it, and `env` prints its addresses only while it is up.
#
# Everything is idempotent: `up` on a running service is a no-op, `down` on a
# stopped one too. Several instances can run side by side on other ports (the
# fault suites restart their own broker and database, never the shared ones):
#
#   EFFECTIVELY_PG_PORT            PostgreSQL port              (15432)
#   EFFECTIVELY_KAFKA_PORT         Kafka PLAINTEXT port         (19092)
#   EFFECTIVELY_KAFKA_CONTROLLER_PORT  KRaft controller port    (PLAINTEXT+1)
#   EFFECTIVELY_REGISTRY_PORT      schema registry HTTP port    (18081)
#   EFFECTIVELY_REGISTRY_MGMT_PORT schema registry health port  (REGISTRY_PORT+1)
#   EFFECTIVELY_REGISTRY_JAVA      a Java 21+ for the registry  (found: stack/registry.sh)
#   EFFECTIVELY_CDC_PG_PORT        the CDC source PostgreSQL's port  (15433; stack/cdc.sh)
#   EFFECTIVELY_CONNECT_PORT       Kafka Connect's REST port    (18083; stack/cdc.sh)
#   EFFECTIVELY_CONNECT_HEAP       Kafka Connect's maximum heap (512m; stack/cdc.sh)
#   EFFECTIVELY_STACK_DIR          data, logs and libs          (/var/tmp/effectively)
#   EFFECTIVELY_KAFKA_SECURITY     sasl_ssl: add SASL_SSL and mTLS listeners and
#                                  the standard authorizer (stack/kafka-security.sh)
#   EFFECTIVELY_PG_TLS             1: PostgreSQL with ssl=on, TCP over TLS only,
#                                  a test CA in the instance folder (stack/pg-tls.sh)
#   EFFECTIVELY_KAFKA_EXTRA_LISTENERS  space-separated NAME:listen_port:advertised_port
#                                  entries: PLAINTEXT listeners NAME on 127.0.0.1:listen_port
#                                  that advertise 127.0.0.1:advertised_port (a proxy in
#                                  front of each, so a client's every connection crosses it;
#                                  the fault suites' network lab). The PLAINTEXT listener
#                                  stays the readiness check and the admin side.
#
# Data and logs live outside the checkout (as root, a checkout under /root is
# unreadable to the postgres user), one folder per instance:
# $EFFECTIVELY_STACK_DIR/pg-<port>/, $EFFECTIVELY_STACK_DIR/kafka-<port>/,
# $EFFECTIVELY_STACK_DIR/registry-<port>/ and (cdc) connect-<port>/.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STACK_DIR=${EFFECTIVELY_STACK_DIR:-/var/tmp/effectively}
PG_PORT=${EFFECTIVELY_PG_PORT:-15432}
KAFKA_PORT=${EFFECTIVELY_KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${EFFECTIVELY_KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}
KAFKA_HEAP=${EFFECTIVELY_KAFKA_HEAP:-512m}
KAFKA_EXTRA_LISTENERS=${EFFECTIVELY_KAFKA_EXTRA_LISTENERS:-}
PG_USER=effectively
PG_PASSWORD=effectively
PG_DB=effectively
# PG_EXTRA_CONF: more postgresql.conf lines for the instance, rewritten with
# the tuning at every start (empty for the stack's own PostgreSQL; stack/cdc.sh
# sets wal_level=logical and the replication limits for its source instance).
PG_EXTRA_CONF=

PG_DIR=$STACK_DIR/pg-$PG_PORT
KAFKA_DIR=$STACK_DIR/kafka-$KAFKA_PORT
kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")
KAFKA_LIBS=$STACK_DIR/kafka-libs-$kafka_version

log() { printf 'stack: %s\n' "$*" >&2; }
die() { printf 'stack: error: %s\n' "$*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# shellcheck source=kafka-security.sh
. "$here/kafka-security.sh"
# shellcheck source=pg-tls.sh
. "$here/pg-tls.sh"
# shellcheck source=registry.sh
. "$here/registry.sh"
# shellcheck source=cdc.sh
. "$here/cdc.sh"

# ---------------------------------------------------------------- PostgreSQL

pg_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  done
  command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return; }
  die "PostgreSQL server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin or PATH; install the postgresql package"
}

# as_pg runs a command as the user that owns the data directory: postgres
# refuses to run as root, so root runs it as the postgres system user.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_running() {
  [ -f "$PG_DIR/data/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$PG_DIR/data" status >/dev/null 2>&1
}

pg_up() {
  PGBIN=$(pg_bindir)
  if pg_running; then
    log "postgres already running on 127.0.0.1:$PG_PORT"
    return
  fi
  if port_open "$PG_PORT"; then
    die "port $PG_PORT is taken by another process; set EFFECTIVELY_PG_PORT to a free port"
  fi
  mkdir -p "$STACK_DIR"
  chmod 755 "$STACK_DIR"
  mkdir -p "$PG_DIR"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root needs the 'postgres' system user (installed with PostgreSQL)"
    chown postgres: "$PG_DIR"
  fi
  local fresh=0
  if [ ! -f "$PG_DIR/data/PG_VERSION" ]; then
    log "initialising a PostgreSQL cluster in $PG_DIR/data"
    as_pg "$PGBIN/initdb" -D "$PG_DIR/data" -U postgres -E UTF8 --locale=C \
      --auth-local=trust --auth-host=scram-sha-256 >"$PG_DIR/initdb.log" 2>&1 \
      || { tail -20 "$PG_DIR/initdb.log" >&2; die "initdb failed (log: $PG_DIR/initdb.log)"; }
    cat >>"$PG_DIR/data/postgresql.conf" <<CONF

# --- effectively local stack ---
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_DIR'
max_connections = 400
shared_buffers = 256MB
log_min_messages = warning
log_line_prefix = '%m [%p] %q%u@%d '
CONF
    fresh=1
  fi
  pg_tuning_conf
  if pg_tls; then
    pg_tls_material
    pg_tls_conf
  fi
  log "starting postgres on 127.0.0.1:$PG_PORT"
  as_pg "$PGBIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" -w -t 60 start >/dev/null \
    || { tail -30 "$PG_DIR/postgres.log" >&2; die "postgres did not start (log: $PG_DIR/postgres.log)"; }
  if [ "$fresh" = 1 ]; then
    as_pg "$PGBIN/psql" -q -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres <<SQL
CREATE ROLE $PG_USER LOGIN PASSWORD '$PG_PASSWORD';
CREATE DATABASE $PG_DB OWNER $PG_USER;
SQL
  fi
  "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -t 30 || die "postgres on 127.0.0.1:$PG_PORT is not accepting connections (log: $PG_DIR/postgres.log)"
  log "postgres ready: $(pg_url)"
}

# pg_tuning_conf (re)writes the write-heavy settings every start, so a
# cluster initialised by an earlier version of this script gets them too.
# At the benchmark's rates (35,000 events/s write ~30 MB/s of WAL) a 2 GB
# max_wal_size forced a checkpoint every 30 s, and every page first
# touched after a checkpoint is logged whole: WAL per event grew with the
# ledger's index through a soak. Checkpoints by time (5 min) and
# compressed full-page images are what a production database of this
# write rate would run with (docs/operations/capacity.md).
pg_tuning_conf() {
  local conf="$PG_DIR/data/postgresql.conf" compression=pglz
  # lz4 is cheaper than pglz; only a server built with it accepts it.
  if "$PGBIN/pg_config" --configure 2>/dev/null | grep -q -- "--with-lz4"; then compression=lz4; fi
  as_pg sh -c "cat >'$PG_DIR/data/effectively-tuning.conf'" <<CONF
# Written by stack/stack.sh at every start; edits are overwritten.
max_wal_size = 16GB
checkpoint_timeout = 5min
wal_compression = $compression
log_autovacuum_min_duration = 1s
$PG_EXTRA_CONF
CONF
  grep -q "^include_if_exists = 'effectively-tuning.conf'" "$conf" \
    || echo "include_if_exists = 'effectively-tuning.conf'" | as_pg sh -c "cat >>'$conf'"
}

pg_down() {
  PGBIN=$(pg_bindir)
  if ! pg_running; then
    log "postgres on $PG_PORT not running"
    return
  fi
  log "stopping postgres on $PG_PORT"
  as_pg "$PGBIN/pg_ctl" -D "$PG_DIR/data" -m fast -w -t 60 stop >/dev/null
}

pg_url() {
  if pg_tls_on; then
    echo "postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB?sslmode=verify-full&sslrootcert=$PG_DIR/tls/ca.pem"
  else
    echo "postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB?sslmode=disable"
  fi
}

# ---------------------------------------------------------------- Kafka

kafka_libs() {
  if [ -f "$KAFKA_LIBS/.complete" ]; then
    return
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn (Maven) not found: it resolves the Kafka broker's jars from Maven Central"
  command -v java >/dev/null 2>&1 || die "java not found: the Kafka broker needs a JDK 17+"
  log "resolving Apache Kafka $kafka_version jars from Maven Central into $KAFKA_LIBS (cached in ~/.m2)"
  rm -rf "$KAFKA_LIBS.tmp"
  mvn -B -q -Dstyle.color=never -f "$here/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$KAFKA_LIBS.tmp" >&2 || die "maven could not resolve the Kafka jars (see output above)"
  local jar
  for jar in log4j-slf4j-impl kafka-server scala-library kafka_2.13; do
    ls "$KAFKA_LIBS.tmp"/$jar-*.jar >/dev/null 2>&1 || die "resolved Kafka libs lack $jar (stack/pom.xml is wrong)"
  done
  rm -rf "$KAFKA_LIBS"
  mv "$KAFKA_LIBS.tmp" "$KAFKA_LIBS"
  touch "$KAFKA_LIBS/.complete"
}

# extra_listeners_check validates EFFECTIVELY_KAFKA_EXTRA_LISTENERS before
# anything is written, and that every extra listen port is free (the
# advertised ports are a proxy's, which is already listening on them).
extra_listeners_check() {
  local entry name listen adv seen=" "
  for entry in $KAFKA_EXTRA_LISTENERS; do
    if ! [[ $entry =~ ^([A-Z][A-Z0-9_]*):([0-9]{1,5}):([0-9]{1,5})$ ]]; then
      die "EFFECTIVELY_KAFKA_EXTRA_LISTENERS: '$entry' is not NAME:listen_port:advertised_port (NAME in capitals, e.g. C0:40001:40002)"
    fi
    name=${BASH_REMATCH[1]} listen=$((10#${BASH_REMATCH[2]})) adv=$((10#${BASH_REMATCH[3]}))
    case "$name" in
      PLAINTEXT | CONTROLLER | SASL_SSL | SSL)
        die "EFFECTIVELY_KAFKA_EXTRA_LISTENERS: '$name' is a listener the stack names itself; choose another name" ;;
    esac
    case "$seen" in
      *" $name "*) die "EFFECTIVELY_KAFKA_EXTRA_LISTENERS: listener '$name' is named twice" ;;
    esac
    seen+="$name "
    if ((listen < 1 || listen > 65535 || adv < 1 || adv > 65535)); then
      die "EFFECTIVELY_KAFKA_EXTRA_LISTENERS: '$entry' has a port outside 1-65535"
    fi
    if ((listen == KAFKA_PORT || listen == KAFKA_CONTROLLER_PORT)); then
      die "EFFECTIVELY_KAFKA_EXTRA_LISTENERS: '$entry' listens on the broker's own port $listen"
    fi
    if port_open "$listen"; then
      die "EFFECTIVELY_KAFKA_EXTRA_LISTENERS: port $listen ($name) is taken by another process; choose a free port"
    fi
  done
}

# extra_listener_properties adds EFFECTIVELY_KAFKA_EXTRA_LISTENERS to the
# instance's listeners, advertised listeners and protocol map (after
# kafka-security.sh has rewritten them, if it did).
extra_listener_properties() {
  [ -n "$KAFKA_EXTRA_LISTENERS" ] || return 0
  local entry name listen adv listeners="" advertised="" protocols=""
  for entry in $KAFKA_EXTRA_LISTENERS; do
    IFS=: read -r name listen adv <<<"$entry"
    listeners+=",$name://127.0.0.1:$listen"
    advertised+=",$name://127.0.0.1:$adv"
    protocols+=",$name:PLAINTEXT"
  done
  sed -i -e "s|^listeners=.*|&$listeners|" -e "s|^advertised.listeners=.*|&$advertised|" \
    -e "s|^listener.security.protocol.map=.*|&$protocols|" "$KAFKA_DIR/server.properties"
}

kafka_pid() { [ -f "$KAFKA_DIR/kafka.pid" ] && cat "$KAFKA_DIR/kafka.pid"; }

kafka_running() {
  local pid
  pid=$(kafka_pid) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

kafka_up() {
  if kafka_running; then
    log "kafka already running on 127.0.0.1:$KAFKA_PORT (pid $(kafka_pid))"
    return
  fi
  if port_open "$KAFKA_PORT"; then
    die "port $KAFKA_PORT is taken by another process; set EFFECTIVELY_KAFKA_PORT to a free port"
  fi
  if port_open "$KAFKA_CONTROLLER_PORT"; then
    die "port $KAFKA_CONTROLLER_PORT is taken by another process; set EFFECTIVELY_KAFKA_CONTROLLER_PORT to a free port"
  fi
  extra_listeners_check
  kafka_libs
  mkdir -p "$KAFKA_DIR"
  sed -e "s|@PORT@|$KAFKA_PORT|g" -e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
      -e "s|@DATA@|$KAFKA_DIR/data|g" "$here/server.properties" >"$KAFKA_DIR/server.properties"
  local format_args=()
  if kafka_secure; then
    secure_material
    secure_properties
    mapfile -t format_args < <(secure_format_args)
  fi
  extra_listener_properties
  sed -e "s|@LOG@|$KAFKA_DIR/kafka.log|g" "$here/log4j2.yaml" >"$KAFKA_DIR/log4j2.yaml"
  local cp="$KAFKA_LIBS/*"
  if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
    log "formatting KRaft storage in $KAFKA_DIR/data"
    local cluster
    cluster=$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    java -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.yaml" -cp "$cp" kafka.tools.StorageTool format \
      --standalone -g -t "$cluster" -c "$KAFKA_DIR/server.properties" "${format_args[@]}" >"$KAFKA_DIR/format.log" 2>&1 \
      || { tail -20 "$KAFKA_DIR/format.log" >&2; die "formatting Kafka storage failed (log: $KAFKA_DIR/format.log)"; }
  fi
  # AppCDS: the first start writes a class-data archive, later starts map it
  # (about a third faster to start; the fault suites restart the broker often).
  local cds=()
  if [ -f "$KAFKA_LIBS/kafka.jsa" ]; then
    cds=(-XX:SharedArchiveFile="$KAFKA_LIBS/kafka.jsa" -Xshare:auto)
  else
    cds=(-XX:ArchiveClassesAtExit="$KAFKA_LIBS/kafka.jsa")
  fi
  log "starting kafka $kafka_version on 127.0.0.1:$KAFKA_PORT (controller $KAFKA_CONTROLLER_PORT)"
  : >"$KAFKA_DIR/kafka.out"
  setsid nohup java -Xms"$KAFKA_HEAP" -Xmx"$KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    "${cds[@]}" -Xlog:cds=off -Xlog:cds+dynamic=off \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.yaml" \
    -cp "$cp" kafka.Kafka "$KAFKA_DIR/server.properties" \
    >>"$KAFKA_DIR/kafka.out" 2>&1 </dev/null &
  echo $! >"$KAFKA_DIR/kafka.pid"
  # The PLAINTEXT port opens only once the broker is ready (the controller
  # port opens earlier), so a TCP connect is the readiness check.
  for _ in $(seq 1 240); do
    if port_open "$KAFKA_PORT"; then
      log "kafka ready: 127.0.0.1:$KAFKA_PORT"
      return
    fi
    if ! kafka_running; then
      tail -30 "$KAFKA_DIR/kafka.out" "$KAFKA_DIR/kafka.log" >&2 2>/dev/null || true
      die "kafka exited during start-up (logs: $KAFKA_DIR/kafka.out, $KAFKA_DIR/kafka.log)"
    fi
    sleep 0.5
  done
  tail -30 "$KAFKA_DIR/kafka.log" >&2 || true
  die "kafka did not open 127.0.0.1:$KAFKA_PORT within 120s (log: $KAFKA_DIR/kafka.log)"
}

kafka_down() {
  if ! kafka_running; then
    log "kafka on $KAFKA_PORT not running"
    rm -f "$KAFKA_DIR/kafka.pid"
    return
  fi
  local pid
  pid=$(kafka_pid)
  log "stopping kafka on $KAFKA_PORT (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 120); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "kafka did not stop within 60s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$KAFKA_DIR/kafka.pid"
}

# ---------------------------------------------------------------- commands

status() {
  if pg_running 2>/dev/null; then echo "postgres: up   127.0.0.1:$PG_PORT ($PG_DIR)"; else echo "postgres: down ($PG_DIR)"; fi
  if kafka_running; then echo "kafka:    up   127.0.0.1:$KAFKA_PORT ($KAFKA_DIR)"; else echo "kafka:    down ($KAFKA_DIR)"; fi
  if registry_running; then echo "registry: up   127.0.0.1:$REGISTRY_PORT ($REGISTRY_DIR)"; else echo "registry: down ($REGISTRY_DIR)"; fi
}

logs() {
  local n=${EFFECTIVELY_LOG_LINES:-40}
  for f in "$PG_DIR/postgres.log" "$KAFKA_DIR/kafka.out" "$KAFKA_DIR/kafka.log" "$REGISTRY_DIR/registry.log"; do
    [ -f "$f" ] || continue
    echo "==> $f (last $n lines) <=="
    tail -n "$n" "$f"
  done
}

env_out() {
  echo "export EFFECTIVELY_TEST_POSTGRES_URL='$(pg_url)'"
  echo "export EFFECTIVELY_TEST_KAFKA_BROKERS='127.0.0.1:$KAFKA_PORT'"
  registry_env_out
  if kafka_secure; then secure_env_out; fi
  if pg_tls_on; then pg_tls_env_out; fi
  cdc_env_out
}

PGBIN=
cmd=${1:-status}
what=${2:-all}
case "$cmd:$what" in
  up:all) pg_up; kafka_up; registry_up ;;
  up:pg) pg_up ;;
  up:kafka) kafka_up ;;
  up:registry) registry_up ;;
  up:cdc) cdc_up ;;
  down:all) registry_down; kafka_down; pg_down ;;
  down:pg) pg_down ;;
  down:kafka) kafka_down ;;
  down:registry) registry_down ;;
  down:cdc) cdc_down ;;
  status:cdc) PGBIN=$(pg_bindir); cdc_status ;;
  status:*) PGBIN=$(pg_bindir); status ;;
  running:all) PGBIN=$(pg_bindir); pg_running && kafka_running && registry_running ;;
  running:pg) PGBIN=$(pg_bindir); pg_running ;;
  running:kafka) kafka_running ;;
  running:registry) registry_running ;;
  running:cdc) PGBIN=$(pg_bindir); cdc_running ;;
  logs:cdc) cdc_logs ;;
  logs:*) logs ;;
  env:*) env_out ;;
  *) die "usage: stack.sh up|down|status|running|logs|env [all|pg|kafka|registry|cdc]" ;;
esac
