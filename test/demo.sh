#!/usr/bin/env bash
# demo.sh — the main job on the local stack (make demo runs it with the stack
# up and leaves the stack running; `make stack-down` stops it):
#   1. migrate a fresh schema "demo";
#   2. produce a generated workload with duplicates and disorder to a fresh
#      topic "demo", remembering the end state it implies;
#   3. run the worker until it has caught up, and check the database against
#      that end state;
#   4. produce the same workload again and show it changed nothing;
#   5. the config-only sink of examples/orders: a shop's JSON webhooks, with
#      re-sends, disorder and bad values, sunk into the tables orders and
#      order_events by the same binary with only a configuration file;
#   6. the same for an Avro topic (examples/products): schemas in the
#      registry, evolving mid-stream, poison dead-lettered with its reason.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=bin/effectively
EVENTS=${DEMO_EVENTS:-100000}
ACCOUNTS=${DEMO_ACCOUNTS:-10000}
SEED=${DEMO_SEED:-42}

base=${EFFECTIVELY_TEST_POSTGRES_URL:-postgres://effectively:effectively@127.0.0.1:15432/effectively?sslmode=disable}
sep='?'; [[ $base == *\?* ]] && sep='&'
export EFFECTIVELY_POSTGRES_URL="${base}${sep}search_path=demo"
export EFFECTIVELY_KAFKA_BROKERS=${EFFECTIVELY_TEST_KAFKA_BROKERS:-127.0.0.1:19092}
export EFFECTIVELY_KAFKA_TOPICS=demo
export EFFECTIVELY_KAFKA_GROUP=demo
export EFFECTIVELY_LOG_FORMAT=console
export EFFECTIVELY_HTTP_ADDR=${DEMO_HTTP_ADDR:-127.0.0.1:9410}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

step() { printf '\n== %s\n' "$*"; }
sql() { psql -X -q -t -A "$base" -c "$1"; }
caught_up() { # wait until the group's stored positions (as `status` shows them) reach $1 records; the rest: the command (default $bin)
  local want=$1 got=0
  shift
  local cmd=("$@")
  [ ${#cmd[@]} -gt 0 ] || cmd=("$bin")
  for _ in $(seq 1 1200); do
    got=$({ "${cmd[@]}" status --json 2>/dev/null || true; } | { grep -o '"stored": [0-9]*' || true; } | awk '{s += $2} END {print s + 0}')
    [ "$got" -ge "$want" ] && return 0
    kill -0 "$worker" 2>/dev/null || { tail -20 "${log:-$work/worker.log}"; echo "demo: the worker exited"; exit 1; }
    sleep 0.25
  done
  echo "demo: the worker applied $got of $want records in 5 minutes"; exit 1
}

step "fresh schema 'demo' and topic 'demo' (8 partitions)"
sql "SET client_min_messages = warning; DROP SCHEMA IF EXISTS demo CASCADE; CREATE SCHEMA demo"
$bin migrate
$bin produce --topic demo --partitions 8 --recreate --yes

step "produce $EVENTS events for $ACCOUNTS accounts: 10% re-sent duplicates, 10% out of order"
$bin produce --topic demo --events "$EVENTS" --accounts "$ACCOUNTS" --seed "$SEED" --expect "$work/expected.json"

step "run the worker until it has caught up"
started=$(date +%s.%N)
$bin run >"$work/worker.log" 2>&1 &
worker=$!
caught_up "$EVENTS"
printf 'applied %d records in %.1f s (worker start-up included)\n' "$EVENTS" "$(echo "$(date +%s.%N) - $started" | bc)"

step "check the database against the generator's end state"
$bin verify --expect "$work/expected.json" | tee "$work/first.txt"

step "produce the same $EVENTS events again: every one is a duplicate now"
$bin produce --topic demo --events "$EVENTS" --accounts "$ACCOUNTS" --seed "$SEED" --expect "$work/expected2.json" >/dev/null
caught_up $((2 * EVENTS))
$bin verify --expect "$work/expected.json" >"$work/second.txt"
grep -E '^(claims|effects digest)' "$work/second.txt"
if [ "$(grep '^effects digest' "$work/first.txt")" = "$(grep '^effects digest' "$work/second.txt")" ]; then
  echo "re-produced $EVENTS records: zero new effects (same claims, same accounts, ledger and balances)"
else
  echo "demo: the second produce changed the effects"; exit 1
fi

step "the group now: effectively status (members, positions, lag, states, what waits)"
$bin status

step "the worker's own account (http://$EFFECTIVELY_HTTP_ADDR/metrics)"
curl -fsS "http://$EFFECTIVELY_HTTP_ADDR/metrics" | grep -E '^effectively_events_total' || true
echo "readyz: $(curl -sS "http://$EFFECTIVELY_HTTP_ADDR/readyz")"
kill -TERM "$worker"
wait "$worker"

step "audit: every record of the topic accounted for (applied, stale, duplicate, dead-lettered)"
$bin audit --topic demo

step "replay the whole topic under a group of its own: every record a duplicate, nothing applied"
EFFECTIVELY_LOG_LEVEL=warn $bin replay --topic demo --replay-group demo-replay --from-start
step "config-only sink (examples/orders): a shop's JSON order webhooks into PostgreSQL, no code"
# The same binary, only a configuration file and a directory of SQL
# migrations (see examples/orders/README.md). Schema "orders", group
# "orders", topic "shop.webhooks".
# The stock binary with the example's configuration alone (the reference
# domain's topic and group variables unset; env execs it, so $! is its PID).
orders=(env -u EFFECTIVELY_KAFKA_TOPICS -u EFFECTIVELY_KAFKA_GROUP EFFECTIVELY_POSTGRES_URL="${base}${sep}search_path=orders"
  EFFECTIVELY_LOG_LEVEL=warn "$bin" --config examples/orders/effectively.yaml)
osql() { psql -X -q -P footer=off "${base}" -c "SET search_path = orders" -c "$1"; }
sql "SET client_min_messages = warning; DROP SCHEMA IF EXISTS orders CASCADE; CREATE SCHEMA orders"
"${orders[@]}" migrate | grep orders_migrations
go run ./examples/orders/gen -orders "${DEMO_ORDERS:-500}" -seed "$SEED" -expect "$work/orders.json" >"$work/webhooks.jsonl"
echo "a webhook: $(head -1 "$work/webhooks.jsonl" | cut -c1-220)..."
"${orders[@]}" produce --file "$work/webhooks.jsonl" --recreate --yes
records=$(jq .records "$work/orders.json")
log=$work/orders.log
"${orders[@]}" run >"$log" 2>&1 &
worker=$!
caught_up "$records" "${orders[@]}"
kill -TERM "$worker"
wait "$worker"

echo; echo "the table orders (each order at its newest version; $(jq '.deleted | length' "$work/orders.json") orders deleted, with tombstones):"
osql "SELECT id, version, status, customer_id, total, currency, jsonb_array_length(items) AS items, gift, updated_at::time(0) FROM orders ORDER BY id LIMIT 8"
echo "the dead letters (every bad value, naming its sink and column):"
osql "SELECT reason, regexp_replace(error, '^permanent failure \(invalid_payload\): ', '') AS error, count(*) FROM dead_letters GROUP BY 1, 2 ORDER BY 3 DESC, 2"
echo "every webhook accounted for (stale: older versions arriving late; duplicate: re-sent webhooks):"
"${orders[@]}" audit | grep -E '^(applied|stale|duplicate|dead_lettered|unaccounted) '
jq -r '.orders[] | "\(.id)|\(.version)"' "$work/orders.json" | sort >"$work/orders.want"
psql -X -q -t -A "$base" -c "SELECT id || '|' || version FROM orders.orders ORDER BY 1" | sort >"$work/orders.got"
got="orders $(wc -l <"$work/orders.got"), order_events $(sql "SELECT count(*) FROM orders.order_events"), deleted $(sql "SELECT count(*) FROM orders.effectively_tombstones"), dead letters $(sql "SELECT count(*) FROM orders.dead_letters WHERE reason = 'invalid_payload'")"
want="orders $(jq '.orders | length' "$work/orders.json"), order_events $(jq '.events | length' "$work/orders.json"), deleted $(jq '.deleted | length' "$work/orders.json"), dead letters $(jq '.bad | length' "$work/orders.json")"
echo "database:  $got"
echo "generator: $want"
if [ "$got" = "$want" ] && cmp -s "$work/orders.want" "$work/orders.got"; then
  echo "every order at the generator's newest version; one order_events row per distinct webhook; every bad value dead-lettered"
else
  diff "$work/orders.want" "$work/orders.got" | head; echo "demo: the orders sink differs from the generator's end state"; exit 1
fi

step "config-only sink of an Avro topic (examples/products): the Confluent wire format, schemas in the registry, no code"
# Product versions in Avro, written by franz-go's sr serde; the schema
# evolves mid-stream (v2 adds color, BACKWARD compatible); re-sends,
# disorder and poison (an unknown schema ID, bytes of no value, a wrong
# magic byte). Schema "products", group "products", topic "shop.products".
export EFFECTIVELY_SCHEMA_REGISTRY_URL=${EFFECTIVELY_TEST_REGISTRY_URL:-http://127.0.0.1:18081/apis/ccompat/v7}
products=(env -u EFFECTIVELY_KAFKA_TOPICS -u EFFECTIVELY_KAFKA_GROUP EFFECTIVELY_POSTGRES_URL="${base}${sep}search_path=products"
  EFFECTIVELY_LOG_LEVEL=warn "$bin" --config examples/products/effectively.yaml)
psql_products() { psql -X -q -P footer=off "${base}" -c "SET search_path = products" -c "$1"; }
sql "SET client_min_messages = warning; DROP SCHEMA IF EXISTS products CASCADE; CREATE SCHEMA products"
"${products[@]}" migrate | grep products_migrations
"${products[@]}" produce --topic shop.products --partitions 4 --recreate --yes >/dev/null
go run ./examples/products/gen -products "${DEMO_PRODUCTS:-1000}" -seed "$SEED" -expect "$work/products.json"
records=$(jq .records "$work/products.json")
log=$work/products.log
"${products[@]}" run >"$log" 2>&1 &
worker=$!
caught_up "$records" "${products[@]}"
kill -TERM "$worker"
wait "$worker"

echo; echo "the table products (each product at its newest version; color only where that version was written with schema v2):"
psql_products "SELECT sku, version, name, price, updated_at::timestamp(0), launch, color FROM products ORDER BY sku LIMIT 8"
echo "the dead letters (every poison record, with its reason):"
psql_products "SELECT reason, count(*), min(left(error, 100)) AS example FROM dead_letters GROUP BY 1 ORDER BY 1"
jq -r '.newest[] | "\(.sku)|\(.version)|\(.color // "")"' "$work/products.json" | sort >"$work/products.want"
psql -X -q -t -A "$base" -c "SELECT sku || '|' || version || '|' || coalesce(color, '') FROM products.products" | sort >"$work/products.got"
got="products $(wc -l <"$work/products.got"), product_events $(sql "SELECT count(*) FROM products.product_events"), dead letters $(sql "SELECT count(*) FROM products.dead_letters")"
want="products $(jq '.newest | length' "$work/products.json"), product_events $(jq .events "$work/products.json"), dead letters $(jq '[.poison[]] | add // 0' "$work/products.json")"
echo "database:  $got"
echo "generator: $want"
if [ "$got" = "$want" ] && cmp -s "$work/products.want" "$work/products.got"; then
  echo "every product at its newest version (v1 and v2 records alike); one product_events row per version; every poison record dead-lettered"
else
  diff "$work/products.want" "$work/products.got" | head; echo "demo: the products sink differs from the generator's end state"; exit 1
fi

echo
echo "demo: done. The stack keeps running (schemas 'demo', 'orders' and 'products', topics 'demo', 'shop.webhooks' and 'shop.products'); stop it with: make stack-down"
