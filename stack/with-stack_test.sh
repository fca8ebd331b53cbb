#!/usr/bin/env bash
# with-stack_test.sh — with-stack.sh leaves up, service by service, what was
# already up, and stops what it started itself. It runs an instance of its own
# on ports no one else uses (make test runs it through test/withstack_test.go,
# which picks free ports):
#
#   WITH_STACK_TEST_PG_PORT          (45432)
#   WITH_STACK_TEST_KAFKA_PORT       (49092)
#   WITH_STACK_TEST_CONTROLLER_PORT  (KAFKA_PORT+1)
#
# The instance is stopped and its data removed when the script ends.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
stack=$here/stack.sh
with=$here/with-stack.sh

export EFFECTIVELY_PG_PORT=${WITH_STACK_TEST_PG_PORT:-45432}
export EFFECTIVELY_KAFKA_PORT=${WITH_STACK_TEST_KAFKA_PORT:-49092}
export EFFECTIVELY_KAFKA_CONTROLLER_PORT=${WITH_STACK_TEST_CONTROLLER_PORT:-$((EFFECTIVELY_KAFKA_PORT + 1))}
export EFFECTIVELY_KAFKA_HEAP=${EFFECTIVELY_KAFKA_HEAP:-384m}
stack_dir=${EFFECTIVELY_STACK_DIR:-/var/tmp/effectively}
unset EFFECTIVELY_KEEP_STACK EFFECTIVELY_TEST_POSTGRES_URL EFFECTIVELY_TEST_KAFKA_BROKERS

fail() { printf 'with-stack_test: FAIL: %s\n' "$*" >&2; exit 1; }
step() { printf 'with-stack_test: %s\n' "$*" >&2; }

if "$stack" running pg || "$stack" running kafka; then
  # Not ours: never stop or remove someone else's instance.
  fail "a stack instance already runs on $EFFECTIVELY_PG_PORT/$EFFECTIVELY_KAFKA_PORT; pick other WITH_STACK_TEST_* ports"
fi
cleanup() {
  "$stack" down >/dev/null 2>&1 || true
  rm -rf "$stack_dir/pg-$EFFECTIVELY_PG_PORT" "$stack_dir/kafka-$EFFECTIVELY_KAFKA_PORT"
}
trap cleanup EXIT

# expect pg|kafka up|down
expect() {
  if "$stack" running "$1"; then
    [ "$2" = up ] || fail "$1 is up, expected down ($3)"
  else
    [ "$2" = down ] || fail "$1 is down, expected up ($3)"
  fi
}

# 1. Only Kafka was up (`stack.sh up kafka`): with-stack starts PostgreSQL for
#    the command and stops only PostgreSQL.
"$stack" up kafka
step "kafka up, postgres down; with-stack runs a command"
"$with" bash -c '"$0" running all && [ -n "$EFFECTIVELY_TEST_POSTGRES_URL" ] && [ -n "$EFFECTIVELY_TEST_KAFKA_BROKERS" ]' "$stack" \
  || fail "the command did not run with both services up and their addresses exported"
expect kafka up "it was up before with-stack.sh"
expect pg down "with-stack.sh started it"

# 2. Both up (`make stack-up`, `make demo`): nothing is stopped, even when the
#    command fails, and the command's exit status comes back.
"$stack" up
step "both up; with-stack runs a failing command"
rc=0
"$with" bash -c 'exit 3' >/dev/null 2>&1 || rc=$?
[ "$rc" = 3 ] || fail "with-stack.sh exited $rc, want the command's 3"
expect pg up "it was up before with-stack.sh"
expect kafka up "it was up before with-stack.sh"

# 3. Nothing up (CI): with-stack starts both and stops both.
"$stack" down
step "nothing up; with-stack runs a command"
"$with" "$stack" running all || fail "the command did not run with both services up"
expect pg down "with-stack.sh started it"
expect kafka down "with-stack.sh started it"

step "ok"
