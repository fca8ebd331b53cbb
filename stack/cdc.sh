# shellcheck shell=bash
# cdc.sh — sourced by stack.sh. A change-data-capture source for the tests,
# the demo and the benchmarks, without Docker (`stack.sh up|down|status|
# running|logs|env cdc`; not part of `all`):
#
#   - a source PostgreSQL of its own on 127.0.0.1:$EFFECTIVELY_CDC_PG_PORT
#     (15433), with wal_level=logical and room for 16 replication slots and
#     WAL senders; the role `cdc` (password `cdc`, LOGIN REPLICATION) owns the
#     database `source`. Started by stack.sh's PostgreSQL functions, in
#     $STACK_DIR/pg-<port>/ like any instance.
#   - Kafka Connect (connect-runtime, the version of stack/connect-pom.xml) in
#     distributed mode against the stack's Kafka (EFFECTIVELY_KAFKA_PORT, which
#     must be up: `stack.sh up kafka`), REST on
#     http://127.0.0.1:$EFFECTIVELY_CONNECT_PORT (18083). Its group and its
#     config, offset and status topics are named after the instance,
#     effectively-connect-<port>[-configs|-offsets|-status], so a killed worker
#     resumes its connectors from their last committed offsets (flushed every
#     second). Converters: JSON, schemas off (stack/connect.properties says
#     how a connector turns them on). Instance folder $STACK_DIR/connect-<port>/.
#     Measured on 2 cores: `up cdc` about 4 s once the libraries are cached
#     (AppCDS after the first `down`); about 170 MB RSS idle, up to 720 MB
#     through a 500,000-row snapshot (about 11,000 rows/s) with the 512m heap.
#   - plugins in $STACK_DIR/connect-plugins-<debezium version>/: the Debezium
#     PostgreSQL connector (resolved with its dependencies, minus what Connect
#     provides, plus the Kafka 4.3 clients Debezium needs a class of) and the
#     Debezium JDBC sink (its plugin archive from Maven Central, which carries
#     its own dependencies; 3.6.1 was never published there, so
#     debezium.jdbc.version of stack/connect-pom.xml is 3.6.0.Final), and
#     Apicurio's Avro converter 2.6.13.Final (stack/connect-pom.xml says why),
#     which writes the Confluent wire format when a connector configures it
#     so (docs/guides/change-data-capture.md has the settings).
#
# `stack.sh env` prints EFFECTIVELY_TEST_CDC_SOURCE_URL (the source database,
# as `cdc`) while the source PostgreSQL is up and EFFECTIVELY_TEST_CONNECT_URL
# while Connect is.
#
# What a connector needs on this stack: the broker does not create topics on
# first use, so a source connector sets topic.creation.default.partitions and
# topic.creation.default.replication.factor=1. State outlives `down`: the
# connectors (in the config topic) start again with the worker; a deleted
# connector's offsets stay in the offsets topic, so one re-created under the
# same name resumes from them; and Debezium's replication slot and
# publication stay in the source database until dropped
# (pg_drop_replication_slot) — a slot nobody reads keeps WAL, up to
# max_slot_wal_keep_size. A test cleans up after itself, or uses names of
# its own.
#
#   EFFECTIVELY_CDC_PG_PORT   the source PostgreSQL's port  (15433)
#   EFFECTIVELY_CONNECT_PORT  Kafka Connect's REST port     (18083)
#   EFFECTIVELY_CONNECT_HEAP  Kafka Connect's maximum heap  (512m)

CDC_PG_PORT=${EFFECTIVELY_CDC_PG_PORT:-15433}
CDC_PG_DIR=$STACK_DIR/pg-$CDC_PG_PORT
CDC_PG_USER=cdc
CDC_PG_PASSWORD=cdc
CDC_PG_DB=source
CDC_PG_CONF="# stack/cdc.sh: a logical replication source
wal_level = logical
max_replication_slots = 16
max_wal_senders = 16
max_slot_wal_keep_size = 8GB"

CONNECT_PORT=${EFFECTIVELY_CONNECT_PORT:-18083}
CONNECT_HEAP=${EFFECTIVELY_CONNECT_HEAP:-512m}
CONNECT_DIR=$STACK_DIR/connect-$CONNECT_PORT
CONNECT_GROUP=effectively-connect-$CONNECT_PORT

connect_pom_prop() { sed -n "s:.*<$1>\(.*\)</$1>.*:\1:p" "$here/connect-pom.xml"; }
connect_version=$(connect_pom_prop kafka.version)
debezium_version=$(connect_pom_prop debezium.version)
debezium_jdbc_version=$(connect_pom_prop debezium.jdbc.version)
apicurio_converter_version=$(connect_pom_prop apicurio.converter.version)
CONNECT_LIBS=$STACK_DIR/connect-libs-$connect_version
CONNECT_PLUGINS=$STACK_DIR/connect-plugins-${debezium_version%.Final}

# ---------------------------------------------------------------- source PostgreSQL

# cdc_pg CMD... runs one of stack.sh's PostgreSQL functions on the source
# instance (in a subshell: the stack's own PG_* settings stay as they are).
cdc_pg() {
  (
    PG_PORT=$CDC_PG_PORT PG_DIR=$CDC_PG_DIR
    PG_USER=$CDC_PG_USER PG_PASSWORD=$CDC_PG_PASSWORD PG_DB=$CDC_PG_DB
    PG_TLS= PG_EXTRA_CONF=$CDC_PG_CONF
    PGBIN=$(pg_bindir)
    "$@"
  )
}

# cdc_pg_setup gives the role REPLICATION and makes sure role and database
# exist (the instance may have been initialised by a plain `up pg` on this
# port), then checks that the running server decodes logically.
cdc_pg_setup() {
  as_pg "$PGBIN/psql" -q -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$PG_USER') THEN
    CREATE ROLE $PG_USER LOGIN PASSWORD '$PG_PASSWORD';
  END IF;
END \$\$;
ALTER ROLE $PG_USER WITH LOGIN REPLICATION;
SELECT 'CREATE DATABASE $PG_DB OWNER $PG_USER'
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$PG_DB') \gexec
SQL
  local level
  level=$(as_pg "$PGBIN/psql" -qAt -h "$PG_DIR" -p "$PG_PORT" -U postgres -d postgres -c 'SHOW wal_level')
  [ "$level" = logical ] || die "the PostgreSQL on $PG_PORT runs with wal_level=$level (it was started without stack/cdc.sh's settings); restart it: stack.sh down cdc && stack.sh up cdc"
}

cdc_pg_up() {
  log "cdc: source postgres on 127.0.0.1:$CDC_PG_PORT (wal_level=logical)"
  cdc_pg pg_up
  cdc_pg cdc_pg_setup
}

cdc_pg_running() { cdc_pg pg_running; }
cdc_pg_down() { cdc_pg pg_down; }
cdc_pg_url() { cdc_pg pg_url; }

# ---------------------------------------------------------------- Kafka Connect

# connect_libs resolves Connect's libs/ once (stack/connect-pom.xml, profile
# connect).
connect_libs() {
  [ -f "$CONNECT_LIBS/.complete" ] && return
  command -v mvn >/dev/null 2>&1 || die "mvn (Maven) not found: it resolves Kafka Connect's jars from Maven Central"
  local tmp=$CONNECT_LIBS.tmp.$$ jar
  log "resolving Kafka Connect $connect_version jars from Maven Central into $CONNECT_LIBS (cached in ~/.m2)"
  mkdir -p "$STACK_DIR"
  rm -rf "$tmp"
  if ! mvn -B -q -Dstyle.color=never -f "$here/connect-pom.xml" -P connect dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" >&2; then
    rm -rf "$tmp"
    die "maven could not resolve the Kafka Connect jars (see output above)"
  fi
  for jar in connect-runtime connect-json kafka-clients log4j-slf4j-impl jackson-dataformat-yaml; do
    ls "$tmp"/$jar-*.jar >/dev/null 2>&1 || { rm -rf "$tmp"; die "resolved Connect libs lack $jar (stack/connect-pom.xml is wrong)"; }
  done
  touch "$tmp/.complete"
  # Another stack.sh may have resolved them meanwhile: keep the first.
  [ -d "$CONNECT_LIBS" ] && [ ! -f "$CONNECT_LIBS/.complete" ] && rm -rf "$CONNECT_LIBS"
  mv -T "$tmp" "$CONNECT_LIBS" 2>/dev/null || rm -rf "$tmp"
  [ -f "$CONNECT_LIBS/.complete" ] || die "could not move the resolved Connect libs to $CONNECT_LIBS"
}

# connect_plugin_install NAME TMP moves a finished plugin folder into place
# (keeping one another stack.sh finished first).
connect_plugin_install() {
  local dest=$CONNECT_PLUGINS/$1
  [ -d "$dest" ] && [ ! -f "$dest/.complete" ] && rm -rf "$dest"
  mv -T "$2" "$dest" 2>/dev/null || rm -rf "$2"
  [ -f "$dest/.complete" ] || die "could not move the $1 plugin to $dest"
}

# connect_plugin_postgres resolves the Debezium PostgreSQL connector once
# (profile debezium-postgres: its runtime dependencies without what the
# worker's classpath provides, plus the kafka-clients Debezium was built
# against — stack/connect-pom.xml says why).
connect_plugin_postgres() {
  local dest=$CONNECT_PLUGINS/debezium-connector-postgres tmp jar
  [ -f "$dest/.complete" ] && return
  tmp=$dest.tmp.$$
  log "resolving the Debezium PostgreSQL connector $debezium_version from Maven Central into $dest"
  mkdir -p "$CONNECT_PLUGINS"
  rm -rf "$tmp"
  if ! mvn -B -q -Dstyle.color=never -f "$here/connect-pom.xml" -P debezium-postgres dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" >&2; then
    rm -rf "$tmp"
    die "maven could not resolve io.debezium:debezium-connector-postgres:$debezium_version (see output above)"
  fi
  for jar in debezium-connector-postgres debezium-connector-common postgresql kafka-clients; do
    ls "$tmp"/$jar-*.jar >/dev/null 2>&1 || { rm -rf "$tmp"; die "the resolved Debezium PostgreSQL plugin lacks $jar (stack/connect-pom.xml is wrong)"; }
  done
  for jar in connect-api connect-runtime slf4j-api jackson-databind; do
    if ls "$tmp"/$jar-*.jar >/dev/null 2>&1; then rm -rf "$tmp"; die "the resolved Debezium PostgreSQL plugin holds $jar, which Connect provides (stack/connect-pom.xml is wrong)"; fi
  done
  touch "$tmp/.complete"
  connect_plugin_install debezium-connector-postgres "$tmp"
}

# connect_plugin_jdbc fetches and unpacks the Debezium JDBC sink's plugin
# archive once, as published (its kafka-clients 4.3 holds a class Debezium
# needs and Kafka 4.4 moved; see stack/connect-pom.xml).
connect_plugin_jdbc() {
  local dest=$CONNECT_PLUGINS/debezium-connector-jdbc tmp
  local artifact="io.debezium:debezium-connector-jdbc:$debezium_jdbc_version:tar.gz:plugin"
  [ -f "$dest/.complete" ] && [ "$(cat "$dest/.complete")" = "$artifact" ] && return
  tmp=$dest.tmp.$$
  log "fetching the Debezium JDBC sink ($artifact, 58 MB, cached in ~/.m2) into $dest"
  mkdir -p "$CONNECT_PLUGINS"
  rm -rf "$tmp"
  mkdir -p "$tmp/download"
  if ! (cd "$tmp" && mvn -B -q -Dstyle.color=never org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
    -Dartifact="$artifact" -DoutputDirectory="$tmp/download") >&2; then
    rm -rf "$tmp"
    die "maven could not fetch $artifact (see output above)"
  fi
  if ! tar xzf "$tmp"/download/debezium-connector-jdbc-*.tar.gz -C "$tmp/download"; then
    rm -rf "$tmp"
    die "unpacking $artifact failed"
  fi
  if ! ls "$tmp"/download/debezium-connector-jdbc/debezium-connector-jdbc-*.jar >/dev/null 2>&1; then
    rm -rf "$tmp"
    die "$artifact has no debezium-connector-jdbc/debezium-connector-jdbc-*.jar"
  fi
  mv "$tmp/download/debezium-connector-jdbc" "$tmp/plugin"
  rm -rf "$tmp/download"
  echo "$artifact" >"$tmp/plugin/.complete"
  [ -d "$dest" ] && rm -rf "$dest" # an older version's
  connect_plugin_install debezium-connector-jdbc "$tmp/plugin"
  rm -rf "$tmp"
}

# connect_plugin_apicurio resolves Apicurio's Avro converter once
# (profile apicurio-converter; stack/connect-pom.xml says why 2.6). Its jar
# declares no ServiceLoader entry, and this worker discovers plugins by
# service loading alone (plugin.discovery=service_load, the fast start):
# a jar of one META-INF/services file declares the converter.
connect_plugin_apicurio() {
  local dest=$CONNECT_PLUGINS/apicurio-converter tmp jar
  [ -f "$dest/.complete" ] && return
  command -v python3 >/dev/null 2>&1 || die "python3 not found: it writes the Apicurio converter's service declaration"
  tmp=$dest.tmp.$$
  log "resolving Apicurio's Avro converter $apicurio_converter_version from Maven Central into $dest"
  mkdir -p "$CONNECT_PLUGINS"
  rm -rf "$tmp"
  if ! mvn -B -q -Dstyle.color=never -f "$here/connect-pom.xml" -P apicurio-converter dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" >&2; then
    rm -rf "$tmp"
    die "maven could not resolve io.apicurio:apicurio-registry-utils-converter:$apicurio_converter_version (see output above)"
  fi
  for jar in apicurio-registry-utils-converter apicurio-registry-serdes-avro-serde avro; do
    ls "$tmp"/$jar-*.jar >/dev/null 2>&1 || { rm -rf "$tmp"; die "the resolved Apicurio converter lacks $jar (stack/connect-pom.xml is wrong)"; }
  done
  for jar in kafka-clients connect-api slf4j-api jackson-databind; do
    if ls "$tmp"/$jar-*.jar >/dev/null 2>&1; then rm -rf "$tmp"; die "the resolved Apicurio converter holds $jar, which Connect provides (stack/connect-pom.xml is wrong)"; fi
  done
  python3 - "$tmp/effectively-converter-services.jar" <<'PY' || { rm -rf "$tmp"; die "could not write the converter's service declaration"; }
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("META-INF/services/org.apache.kafka.connect.storage.Converter",
               "io.apicurio.registry.utils.converter.AvroConverter\n")
PY
  touch "$tmp/.complete"
  connect_plugin_install apicurio-converter "$tmp"
}

connect_pid() { [ -f "$CONNECT_DIR/connect.pid" ] && cat "$CONNECT_DIR/connect.pid"; }

# connect_alive PID: PID is live and is this instance's worker (a stale pid
# file may name another process by now).
connect_alive() {
  proc_live "$1" || return 1
  case "$(ps -o args= -p "$1" 2>/dev/null)" in
    *" $CONNECT_DIR/connect.properties") return 0 ;;
    *) return 1 ;;
  esac
}

connect_running() {
  local pid
  pid=$(connect_pid) || return 1
  [ -n "$pid" ] && connect_alive "$pid"
}

connect_url() { echo "http://127.0.0.1:$CONNECT_PORT"; }

# connect_ready: the REST API answers, the worker has joined its group
# (/health answers 200 only then) and the Debezium plugin was found.
connect_ready() {
  local url
  url=$(connect_url)
  curl -sf --max-time 2 -o /dev/null "$url/" || return 1
  curl -sf --max-time 2 -o /dev/null "$url/health" || return 1
  curl -sf --max-time 5 "$url/connector-plugins" 2>/dev/null | grep -q '"io.debezium.connector.postgresql.PostgresConnector"'
}

connect_kafka_check() {
  port_open "$KAFKA_PORT" \
    || die "no Kafka on 127.0.0.1:$KAFKA_PORT: Connect keeps its configs, offsets and statuses there; start it first (stack.sh up kafka)"
}

connect_up() {
  if connect_running; then
    log "connect already running on 127.0.0.1:$CONNECT_PORT (pid $(connect_pid))"
    return
  fi
  if port_open "$CONNECT_PORT"; then
    die "port $CONNECT_PORT is taken by another process; set EFFECTIVELY_CONNECT_PORT to a free port"
  fi
  connect_kafka_check
  command -v curl >/dev/null 2>&1 || die "curl not found: it checks Kafka Connect's readiness"
  command -v java >/dev/null 2>&1 || die "java not found: Kafka Connect $connect_version needs a JDK 17+"
  local m
  m=$(java_major "$(command -v java)") || die "java on PATH does not run"
  ((m >= 17)) || die "java on PATH is Java $m; Kafka Connect $connect_version needs Java 17+"
  connect_libs
  connect_plugin_postgres
  connect_plugin_jdbc
  connect_plugin_apicurio
  mkdir -p "$CONNECT_DIR"
  sed -e "s|@KAFKA@|127.0.0.1:$KAFKA_PORT|g" -e "s|@PORT@|$CONNECT_PORT|g" -e "s|@GROUP@|$CONNECT_GROUP|g" \
    -e "s|@PLUGINS@|$CONNECT_PLUGINS|g" "$here/connect.properties" >"$CONNECT_DIR/connect.properties"
  sed -e "s|@LOG@|$CONNECT_DIR/connect.log|g" "$here/connect-log4j2.yaml" >"$CONNECT_DIR/log4j2.yaml"
  # AppCDS, as for the broker: the first start writes a class-data archive
  # at exit (a `down`, not a SIGKILL), later starts map it.
  local cds=()
  if [ -f "$CONNECT_LIBS/connect.jsa" ]; then
    cds=(-XX:SharedArchiveFile="$CONNECT_LIBS/connect.jsa" -Xshare:auto)
  else
    cds=(-XX:ArchiveClassesAtExit="$CONNECT_LIBS/connect.jsa")
  fi
  log "starting kafka connect $connect_version on $(connect_url) (kafka 127.0.0.1:$KAFKA_PORT, group $CONNECT_GROUP)"
  : >"$CONNECT_DIR/connect.out"
  setsid nohup java -Xms128m -Xmx"$CONNECT_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    "${cds[@]}" -Xlog:cds=off -Xlog:cds+dynamic=off \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$CONNECT_DIR/log4j2.yaml" \
    -cp "$CONNECT_LIBS/*" org.apache.kafka.connect.cli.ConnectDistributed "$CONNECT_DIR/connect.properties" \
    >>"$CONNECT_DIR/connect.out" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$CONNECT_DIR/connect.pid"
  for _ in $(seq 1 360); do
    if connect_ready; then
      log "connect ready: $(connect_url)"
      return
    fi
    if ! proc_live "$pid"; then
      tail -30 "$CONNECT_DIR/connect.out" "$CONNECT_DIR/connect.log" >&2 2>/dev/null || true
      rm -f "$CONNECT_DIR/connect.pid"
      die "kafka connect exited during start-up (logs: $CONNECT_DIR/connect.out, $CONNECT_DIR/connect.log)"
    fi
    sleep 0.5
  done
  tail -30 "$CONNECT_DIR/connect.log" >&2 || true
  die "kafka connect was not ready on $(connect_url) within 180s (log: $CONNECT_DIR/connect.log)"
}

connect_down() {
  if ! connect_running; then
    log "connect on $CONNECT_PORT not running"
    rm -f "$CONNECT_DIR/connect.pid"
    return
  fi
  local pid
  pid=$(connect_pid)
  log "stopping kafka connect on $CONNECT_PORT (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 120); do
    connect_alive "$pid" || break
    sleep 0.5
  done
  if connect_alive "$pid"; then
    log "kafka connect did not stop within 60s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 10); do
      connect_alive "$pid" || break
      sleep 0.5
    done
  fi
  rm -f "$CONNECT_DIR/connect.pid"
}

# ---------------------------------------------------------------- commands

cdc_up() {
  # Fail before starting anything when Connect could not start.
  if ! connect_running; then
    port_open "$CONNECT_PORT" && die "port $CONNECT_PORT is taken by another process; set EFFECTIVELY_CONNECT_PORT to a free port"
    connect_kafka_check
  fi
  cdc_pg_up
  connect_up
}

cdc_down() {
  connect_down
  cdc_pg_down
}

cdc_running() { cdc_pg_running && connect_running; }

cdc_status() {
  if cdc_pg_running; then echo "cdc-pg:   up   127.0.0.1:$CDC_PG_PORT ($CDC_PG_DIR)"; else echo "cdc-pg:   down ($CDC_PG_DIR)"; fi
  if connect_running; then echo "connect:  up   $(connect_url) ($CONNECT_DIR)"; else echo "connect:  down ($CONNECT_DIR)"; fi
}

cdc_logs() {
  local n=${EFFECTIVELY_LOG_LINES:-40} f
  for f in "$CDC_PG_DIR/postgres.log" "$CONNECT_DIR/connect.out" "$CONNECT_DIR/connect.log"; do
    [ -f "$f" ] || continue
    echo "==> $f (last $n lines) <=="
    tail -n "$n" "$f"
  done
}

# cdc_env_out prints the addresses of what is up (nothing when cdc is down;
# the pid file check first: `env` must not need PostgreSQL's binaries).
cdc_env_out() {
  if [ -f "$CDC_PG_DIR/data/postmaster.pid" ] && cdc_pg_running; then
    echo "export EFFECTIVELY_TEST_CDC_SOURCE_URL='$(cdc_pg_url)'"
  fi
  if connect_running; then
    echo "export EFFECTIVELY_TEST_CONNECT_URL='$(connect_url)'"
  fi
}
