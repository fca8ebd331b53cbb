package webhooks_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/examples/orders/webhooks"
)

type parsed struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	CreatedAt string `json:"created_at"`
	Data      struct {
		Order struct {
			ID      string `json:"id"`
			Version int64  `json:"version"`
		} `json:"order"`
	} `json:"data"`
}

// The stream is reproducible, keyed by order, re-sends are byte-identical,
// and the expected end state equals what a version gate with tombstones
// reaches applying the valid webhooks one by one in arrival order — an
// oracle independent of the generator's own "highest version wins".
func TestGenerateAgreesWithAnInOrderOracle(t *testing.T) {
	cfg := webhooks.Config{Orders: 300, Deleted: 0.2, Duplicates: 0.2, OutOfOrder: 0.3, Bad: 0.05, Seed: 5}
	lines, exp, err := webhooks.Generate(cfg)
	require.NoError(t, err)
	again, _, err := webhooks.Generate(cfg)
	require.NoError(t, err)
	require.Equal(t, lines, again, "the same seed gives the same stream")
	require.Len(t, lines, exp.Records)

	bodies := map[string]string{}
	type row struct {
		version int64
		deleted bool
	}
	state := map[string]row{}
	for _, l := range lines {
		var w parsed
		require.NoError(t, json.Unmarshal(l.Value, &w))
		require.Equal(t, l.Key, w.Data.Order.ID, "records are keyed by order ID")
		if prev, seen := bodies[w.ID]; seen {
			require.Equal(t, prev, string(l.Value), "a re-send of %s is byte-identical", w.ID)
			continue
		}
		bodies[w.ID] = string(l.Value)
		if _, bad := exp.Bad[w.ID]; bad {
			require.NotContains(t, exp.Events, w.ID)
			continue
		}
		require.Contains(t, exp.Events, w.ID)
		// The gate: a row or tombstone at this version or newer makes the
		// webhook stale.
		if cur, ok := state[w.Data.Order.ID]; ok && cur.version >= w.Data.Order.Version {
			continue
		}
		state[w.Data.Order.ID] = row{version: w.Data.Order.Version, deleted: w.Type == webhooks.TypeDeleted}
	}
	require.Len(t, bodies, len(exp.Events)+len(exp.Bad), "every distinct webhook is valid or bad")
	require.Equal(t, exp.Records, len(bodies)+exp.Duplicates)

	var deleted []string
	live := 0
	for id, r := range state {
		if r.deleted {
			deleted = append(deleted, id)
			continue
		}
		live++
		require.Equal(t, r.version, exp.Orders[id].Version, "order %s", id)
	}
	require.Equal(t, live, len(exp.Orders))
	require.ElementsMatch(t, deleted, exp.Deleted)

	// The stream has every kind of trouble.
	require.Positive(t, exp.Duplicates)
	require.Positive(t, exp.Swaps)
	require.Positive(t, exp.LateAfterDelete)
	columns := map[string]bool{}
	for _, c := range exp.Bad {
		columns[c] = true
	}
	require.Equal(t, map[string]bool{"total": true, "status": true, "currency": true, "placed_at": true, "occurred_at": true}, columns)
}

// A large webhook is about the size asked for, valid, and carries the
// order and event it says it leaves.
func TestLarge(t *testing.T) {
	line, order, ev := webhooks.Large(7, "ord_big", 1_000_000)
	require.InDelta(t, 1_000_000, len(line.Value), 200)
	require.Equal(t, "ord_big", line.Key)
	var w struct {
		parsed
		Data struct {
			Order struct {
				ID    string          `json:"id"`
				Items json.RawMessage `json:"items"`
				Total string          `json:"total"`
			} `json:"order"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(line.Value, &w))
	require.Equal(t, ev.ID, w.ID)
	require.Equal(t, webhooks.TypeCreated, w.Type)
	require.Equal(t, "ord_big", w.Data.Order.ID)
	require.Equal(t, order.Total, w.Data.Order.Total)
	require.JSONEq(t, string(order.Items), string(w.Data.Order.Items))
	require.Greater(t, len(order.Items), 900_000)
}
