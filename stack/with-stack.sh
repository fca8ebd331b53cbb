#!/usr/bin/env bash
# with-stack.sh CMD... — run CMD with the local stack up and its addresses in
# EFFECTIVELY_TEST_POSTGRES_URL / EFFECTIVELY_TEST_KAFKA_BROKERS. Services this
# script started are stopped afterwards (CI starts from nothing and must end
# with nothing running); services that were already up are left up. When CMD
# fails, the tail of the services' logs is printed.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
stack=$here/stack.sh

was_up=$("$stack" status | grep -c ': up' || true)
if ! "$stack" up; then
  "$stack" logs
  exit 1
fi
eval "$("$stack" env)"
export EFFECTIVELY_TEST_POSTGRES_URL EFFECTIVELY_TEST_KAFKA_BROKERS

"$@"
rc=$?
if [ $rc -ne 0 ]; then
  echo "with-stack: '$*' failed (exit $rc); service logs follow" >&2
  "$stack" logs >&2
fi
if [ "$was_up" -lt 2 ] && [ "${EFFECTIVELY_KEEP_STACK:-}" != 1 ]; then
  "$stack" down
fi
exit $rc
