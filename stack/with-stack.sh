#!/usr/bin/env bash
# with-stack.sh CMD... — run CMD with the local stack (PostgreSQL, Kafka and the
# schema registry) up and its addresses in EFFECTIVELY_TEST_POSTGRES_URL /
# EFFECTIVELY_TEST_KAFKA_BROKERS / EFFECTIVELY_TEST_REGISTRY_URL. Services this
# script started are stopped afterwards (CI starts from nothing and must end
# with nothing running); services that were already up are left up, service
# by service (a user who ran `stack.sh up pg` keeps PostgreSQL). When CMD
# fails, the tail of the services' logs is printed. EFFECTIVELY_KEEP_STACK=1
# leaves everything up.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
stack=$here/stack.sh

# Which services this script starts, decided per service from stack.sh's exit
# status (not from parsing its human-readable output).
started=()
for svc in pg kafka registry; do
  if ! "$stack" running "$svc"; then
    started+=("$svc")
  fi
done

stop_started() {
  [ "${EFFECTIVELY_KEEP_STACK:-}" = 1 ] && return
  local i
  # Reverse order (registry, Kafka, PostgreSQL), as `stack.sh down` does.
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do
    "$stack" down "${started[i]}"
  done
}

for svc in "${started[@]}"; do
  if ! "$stack" up "$svc"; then
    "$stack" logs
    stop_started
    exit 1
  fi
done
eval "$("$stack" env)"
export EFFECTIVELY_TEST_POSTGRES_URL EFFECTIVELY_TEST_KAFKA_BROKERS EFFECTIVELY_TEST_REGISTRY_URL

# An interrupt (^C on make test) still stops what this script started; the
# signal reaches CMD through the process group.
trap 'stop_started; exit 130' INT
trap 'stop_started; exit 143' TERM

"$@"
rc=$?
trap - INT TERM
if [ $rc -ne 0 ]; then
  echo "with-stack: '$*' failed (exit $rc); service logs follow" >&2
  "$stack" logs >&2
fi
stop_started
exit $rc
