#!/usr/bin/env bash
# with-stack_test.sh — with-stack.sh leaves up, service by service, what was
# already up, and stops what it started itself. It runs an instance of its own
# on ports no one else uses (make test runs it through test/withstack_test.go,
# which picks free ports):
#
#   WITH_STACK_TEST_PG_PORT          (45432)
#   WITH_STACK_TEST_KAFKA_PORT       (49092)
#   WITH_STACK_TEST_CONTROLLER_PORT  (KAFKA_PORT+1)
#   WITH_STACK_TEST_REGISTRY_PORT    (a free even port in 30000-32764,
#                                    below the ephemeral ports Go's free ports come from)
#   WITH_STACK_TEST_REGISTRY_MGMT_PORT  (REGISTRY_PORT+1)
#
# The instance is stopped and its data removed when the script ends.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
stack=$here/stack.sh
with=$here/with-stack.sh
stack_dir=${EFFECTIVELY_STACK_DIR:-/var/tmp/effectively}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port_pair prints a port P such that P and P+1 are free and no
# registry instance folder is named after P (a fixed default would collide
# when two checkouts run make test at once).
free_port_pair() {
  local p
  for _ in $(seq 1 100); do
    p=$((30000 + (RANDOM % 1383) * 2))
    if ! port_open "$p" && ! port_open $((p + 1)) && [ ! -e "$stack_dir/registry-$p" ]; then
      echo "$p"
      return
    fi
  done
  echo "with-stack_test: FAIL: no free port pair for the registry; set WITH_STACK_TEST_REGISTRY_PORT" >&2
  exit 1
}

export EFFECTIVELY_PG_PORT=${WITH_STACK_TEST_PG_PORT:-45432}
export EFFECTIVELY_KAFKA_PORT=${WITH_STACK_TEST_KAFKA_PORT:-49092}
export EFFECTIVELY_KAFKA_CONTROLLER_PORT=${WITH_STACK_TEST_CONTROLLER_PORT:-$((EFFECTIVELY_KAFKA_PORT + 1))}
export EFFECTIVELY_KAFKA_HEAP=${EFFECTIVELY_KAFKA_HEAP:-384m}
if [ -z "${WITH_STACK_TEST_REGISTRY_PORT:-}" ]; then
  WITH_STACK_TEST_REGISTRY_PORT=$(free_port_pair)
fi
export EFFECTIVELY_REGISTRY_PORT=$WITH_STACK_TEST_REGISTRY_PORT
export EFFECTIVELY_REGISTRY_MGMT_PORT=${WITH_STACK_TEST_REGISTRY_MGMT_PORT:-$((EFFECTIVELY_REGISTRY_PORT + 1))}
unset EFFECTIVELY_KEEP_STACK EFFECTIVELY_TEST_POSTGRES_URL EFFECTIVELY_TEST_KAFKA_BROKERS EFFECTIVELY_TEST_REGISTRY_URL

fail() { printf 'with-stack_test: FAIL: %s\n' "$*" >&2; exit 1; }
step() { printf 'with-stack_test: %s\n' "$*" >&2; }

if "$stack" running pg || "$stack" running kafka || "$stack" running registry; then
  # Not ours: never stop or remove someone else's instance.
  fail "a stack instance already runs on $EFFECTIVELY_PG_PORT/$EFFECTIVELY_KAFKA_PORT/$EFFECTIVELY_REGISTRY_PORT; pick other WITH_STACK_TEST_* ports"
fi
cleanup() {
  "$stack" down >/dev/null 2>&1 || true
  rm -rf "$stack_dir/pg-$EFFECTIVELY_PG_PORT" "$stack_dir/kafka-$EFFECTIVELY_KAFKA_PORT" \
    "$stack_dir/registry-$EFFECTIVELY_REGISTRY_PORT"
}
trap cleanup EXIT

# expect pg|kafka|registry up|down
expect() {
  if "$stack" running "$1"; then
    [ "$2" = up ] || fail "$1 is up, expected down ($3)"
  else
    [ "$2" = down ] || fail "$1 is down, expected up ($3)"
  fi
}

# 1. Only Kafka was up (`stack.sh up kafka`): with-stack starts PostgreSQL and
#    the registry for the command and stops only them.
"$stack" up kafka
step "kafka up, postgres and registry down; with-stack runs a command"
# shellcheck disable=SC2016 # expanded by the inner bash, under with-stack.sh
"$with" bash -c '"$0" running all && [ -n "$EFFECTIVELY_TEST_POSTGRES_URL" ] && [ -n "$EFFECTIVELY_TEST_KAFKA_BROKERS" ] &&
  [ "$EFFECTIVELY_TEST_REGISTRY_URL" = "http://127.0.0.1:$EFFECTIVELY_REGISTRY_PORT/apis/ccompat/v7" ] &&
  curl -sf -o /dev/null "$EFFECTIVELY_TEST_REGISTRY_URL/subjects"' "$stack" \
  || fail "the command did not run with all three services up and their addresses exported"
expect kafka up "it was up before with-stack.sh"
expect pg down "with-stack.sh started it"
expect registry down "with-stack.sh started it"

# 2. All up (`make stack-up`, `make demo`): nothing is stopped, even when the
#    command fails, and the command's exit status comes back.
"$stack" up
step "all up; with-stack runs a failing command"
rc=0
"$with" bash -c 'exit 3' >/dev/null 2>&1 || rc=$?
[ "$rc" = 3 ] || fail "with-stack.sh exited $rc, want the command's 3"
expect pg up "it was up before with-stack.sh"
expect kafka up "it was up before with-stack.sh"
expect registry up "it was up before with-stack.sh"

# 3. Nothing up (CI): with-stack starts all three and stops all three.
"$stack" down
step "nothing up; with-stack runs a command"
"$with" "$stack" running all || fail "the command did not run with all three services up"
expect pg down "with-stack.sh started it"
expect kafka down "with-stack.sh started it"
expect registry down "with-stack.sh started it"

step "ok"
