// Command gen writes sample order webhooks for the orders example as the
// JSON lines `effectively produce --file` sends, with re-sent webhooks,
// disorder and bad values, and (with -expect) the end state a correct
// worker reaches, computed from the webhooks alone:
//
//	go run ./examples/orders/gen -orders 500 -expect /tmp/orders-expected.json > /tmp/webhooks.jsonl
//	bin/effectively --config examples/orders/effectively.yaml produce --file /tmp/webhooks.jsonl
//
// It is sample data for the example, not part of it: the example itself is
// configuration and SQL only.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/effectively-io/effectively/examples/orders/webhooks"
)

func main() {
	var cfg webhooks.Config
	flag.IntVar(&cfg.Orders, "orders", 200, "number of orders")
	flag.IntVar(&cfg.MaxUpdates, "max-updates", 4, "most updates per order after its creation")
	flag.Float64Var(&cfg.Deleted, "deleted", 0.1, "share of orders deleted at the end")
	flag.Float64Var(&cfg.Duplicates, "duplicates", 0.1, "share of webhooks re-sent later")
	flag.Float64Var(&cfg.OutOfOrder, "out-of-order", 0.2, "share of events swapped with their order's next one")
	flag.Float64Var(&cfg.Bad, "bad", 0.02, "share of events with a value that does not fit its column")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the generator")
	out := flag.String("out", "-", "file to write the JSON lines to ('-': stdout)")
	expect := flag.String("expect", "", "file to write the expected end state to (JSON)")
	flag.Parse()
	if err := run(cfg, *out, *expect); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(cfg webhooks.Config, out, expect string) error {
	lines, exp, err := webhooks.Generate(cfg)
	if err != nil {
		return err
	}
	f := os.Stdout
	if out != "-" {
		if f, err = os.Create(out); err != nil {
			return err
		}
		defer f.Close()
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if expect != "" {
		b, err := json.MarshalIndent(exp, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(expect, b, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "gen: %d webhooks (%d re-sent, %d swapped, %d bad): expect %d orders, %d deleted, %d order_events, %d dead letters\n",
		exp.Records, exp.Duplicates, exp.Swaps, len(exp.Bad), len(exp.Orders), len(exp.Deleted), len(exp.Events), len(exp.Bad))
	return nil
}
