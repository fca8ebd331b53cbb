#!/usr/bin/env bash
# make closure: what a team's `go mod tidy` downloads when its module
# requires the engine. In an empty module cache, two modules are tidied:
#   team  — a build of its own: a worker with one Go handler embedded in its
#           own main (service.New, HandleFunc, NewWorker with its own zap
#           logger and Prometheus registry) and a handler test written with
#           effectivelytest; the engine taken from this checkout by a
#           replace directive;
#   floor — only franz-go's kgo and pgx's pool: what any Kafka-to-PostgreSQL
#           worker in Go downloads before a line of its own.
# It prints, for each, the bytes downloaded (module zips and go.mod files,
# as the proxy serves them) and the size of the extracted cache, and the
# largest modules of the team's. It needs the Go module proxy; it asserts
# nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
go=${GO:-go}
export GOWORK=off GOFLAGS=-mod=mod
goversion=$(sed -n 's/^go //p' "$root/go.mod")

mkdir -p "$work/team" "$work/floor"
cat >"$work/team/go.mod" <<MOD
module example.com/billing

go $goversion

require github.com/effectively-io/effectively v0.0.0

replace github.com/effectively-io/effectively => $root
MOD
cat >"$work/team/main.go" <<'GO'
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/event"
	"github.com/effectively-io/effectively/handlers"
	"github.com/effectively-io/effectively/service"
)

func newApp() *service.App {
	app := service.New("billing")
	app.HandleFunc("invoice.issued", func(context.Context, *handlers.Effects, event.Event) error { return nil })
	return app
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	app := newApp()
	cfg, err := app.LoadConfig("")
	if err != nil {
		panic(err)
	}
	w, err := service.NewWorker(app, cfg, service.WorkerOptions{Logger: zap.NewExample(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		panic(err)
	}
	_ = w.Run(ctx)
}
GO
cat >"$work/team/main_test.go" <<'GO'
package main

import (
	"testing"

	"github.com/effectively-io/effectively/dedupe"
	"github.com/effectively-io/effectively/effectivelytest"
)

func TestInvoice(t *testing.T) {
	kit := effectivelytest.New(t, newApp(), effectivelytest.Options{Topic: "billing"})
	if res := kit.Apply(kit.CloudEvent("e1", "invoice.issued", "inv-1", 1, nil)); res.Counts[dedupe.Applied] != 1 {
		t.Fatal(res.Counts)
	}
}
GO
cat >"$work/floor/go.mod" <<MOD
module example.com/floor

go $goversion
MOD
cat >"$work/floor/main.go" <<'GO'
package main

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

var _, _ = kgo.NewClient, pgxpool.New

func main() {}
GO

measure() {
  local name=$1 cache="$work/cache-$1"
  (cd "$work/$name" && GOMODCACHE=$cache "$go" mod tidy >/dev/null 2>&1) || { echo "$name: go mod tidy failed"; (cd "$work/$name" && GOMODCACHE=$cache "$go" mod tidy); exit 1; }
  local dl extracted
  dl=$(find "$cache/cache/download" -type f \( -name '*.zip' -o -name '*.mod' \) -printf '%s\n' | awk '{s+=$1} END {printf "%.1f", s/1e6}')
  extracted=$(du -sm --exclude=cache "$cache" | cut -f1)
  printf '%-6s downloaded %7s MB  extracted %5s MB  modules %3d  go.mod requirements %3d\n' "$name" "$dl" "$extracted" \
    "$(find "$cache/cache/download" -name '*.zip' | wc -l)" "$(grep -c '^\s' "$work/$name/go.mod" || true)"
}
echo "go mod tidy in an empty module cache ($("$go" env GOPROXY)):"
measure floor
measure team
echo "largest modules the team downloads (zip):"
find "$work/cache-team/cache/download" -name '*.zip' -printf '%s %P\n' | sort -rn | head -8 |
  awk '{printf "  %6.1f MB  %s\n", $1/1e6, $2}' | sed 's#/@v/# #; s#\.zip$##'
