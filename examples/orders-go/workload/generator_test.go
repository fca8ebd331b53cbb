package workload

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testConfig() Config {
	return Config{Orders: 300, Events: 8000, Duplicates: 0.1, OutOfOrder: 0.1, Orphans: 3, Seed: 7,
		StartTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func TestGenerateIsDeterministic(t *testing.T) {
	t.Parallel()
	a, expA, err := Generate(testConfig())
	require.NoError(t, err)
	b, expB, err := Generate(testConfig())
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, expA, expB)

	other := testConfig()
	other.Seed = 8
	c, _, err := Generate(other)
	require.NoError(t, err)
	require.NotEqual(t, a[0].Value, c[0].Value)
}

func TestGenerateCounts(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	recs, exp, err := Generate(cfg)
	require.NoError(t, err)
	require.Len(t, recs, cfg.Events)
	require.Equal(t, cfg.Events, exp.Records)
	require.Equal(t, 800, exp.Duplicates)
	require.Equal(t, exp.Records, exp.Distinct+exp.Duplicates)
	require.Len(t, exp.Orders, cfg.Orders)
	require.Len(t, exp.Parked, cfg.Orphans)
	require.Equal(t, cfg.Orders, exp.Placed)
	// Both kinds of disorder happen: older versions after newer ones, and
	// lines before their order.
	require.Positive(t, exp.OutOfOrder)
	require.Positive(t, exp.Stale)
	require.Positive(t, exp.LinesEarly)

	seen := map[string]bool{}
	for _, r := range recs {
		if r.Resend {
			require.True(t, seen[string(r.Key)+"\x00"+string(r.Value)], "a re-send repeats an earlier record: %s", r.Value)
			continue
		}
		seen[string(r.Key)+"\x00"+string(r.Value)] = true
	}
}

func TestGenerateWithoutDisorderOrDuplicates(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Duplicates, cfg.OutOfOrder, cfg.Orphans = 0, 0, 0
	recs, exp, err := Generate(cfg)
	require.NoError(t, err)
	require.Equal(t, cfg.Events, exp.Distinct)
	require.Zero(t, exp.Stale)
	require.Zero(t, exp.LinesEarly)
	for _, r := range recs {
		require.False(t, r.Resend)
	}
}

// TestExpectedFromTheRecords recomputes the end state from the records'
// bytes alone, as a consumer would see them, and compares it with the
// generator's bookkeeping.
func TestExpectedFromTheRecords(t *testing.T) {
	t.Parallel()
	recs, exp, err := Generate(testConfig())
	require.NoError(t, err)
	type ce struct {
		ID              string          `json:"id"`
		Type            string          `json:"type"`
		Subject         string          `json:"subject"`
		ResourceVersion int64           `json:"resourceversion"`
		Data            json.RawMessage `json:"data"`
	}
	orders := map[string]Order{}
	lines := map[string]Line{}
	ids := map[string]string{}
	placed, stale := 0, 0
	for _, r := range recs {
		var e ce
		require.NoError(t, json.Unmarshal(r.Value, &e))
		require.Equal(t, e.Subject, string(r.Key), "keyed by order ID")
		if prev, ok := ids[e.ID]; ok {
			require.Equal(t, prev, string(r.Value), "an id is only ever re-sent with the same payload")
			continue
		}
		ids[e.ID] = string(r.Value)
		switch e.Type {
		case TypeLineAdded:
			var d lineData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			lines[d.LineID] = Line{OrderID: e.Subject, SKU: d.SKU, Quantity: d.Quantity, UnitPriceCents: d.UnitPriceCents}
		default:
			var d orderData
			dec := json.NewDecoder(bytes.NewReader(e.Data))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&d))
			if e.Type == TypePlaced {
				placed++
			}
			if cur, ok := orders[e.Subject]; ok && cur.Version > e.ResourceVersion {
				stale++
				continue
			}
			status := StatusOpen
			if e.Type == TypeCancelled {
				status = StatusCancelled
			}
			orders[e.Subject] = Order{Version: e.ResourceVersion, Customer: d.Customer, TotalCents: d.TotalCents, Status: status}
		}
	}
	require.Equal(t, exp.Orders, orders)
	for id, l := range exp.Parked {
		require.Equal(t, l, lines[id])
		delete(lines, id)
	}
	require.Equal(t, exp.Lines, lines)
	require.Equal(t, exp.Placed, placed)
	require.Equal(t, exp.Stale, stale)
	require.Equal(t, exp.Distinct, len(ids))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{Orders: 0, Events: 1},
		{Orders: 1, Events: -1},
		{Orders: 1, Duplicates: 1},
		{Orders: 1, OutOfOrder: 0.6},
		{Orders: 1, Orphans: -1},
	} {
		_, _, err := Generate(c)
		require.Error(t, err, "%+v", c)
	}
}
