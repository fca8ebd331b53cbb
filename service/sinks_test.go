package service

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A directory of postgres.migrations names its set (and version table)
// after its parent and itself, bounded to stay an identifier.
func TestSetNameOfAMigrationsDirectory(t *testing.T) {
	require.Equal(t, "orders_migrations", setName("examples/orders/migrations"))
	require.Equal(t, "migrations", setName("migrations"))
	require.Equal(t, "m_2026_schema", setName("2026 schema"))
	long := setName("/srv/" + strings.Repeat("very-long-directory-name-", 4) + "/db")
	require.LessOrEqual(t, len(long), maxSetName)
	require.NotEqual(t, long, setName("/srv/"+strings.Repeat("very-long-directory-name-", 4)+"/db2"))
	require.Regexp(t, `^[a-z_][a-z0-9_]*$`, long+"_schema_version")
}

// A sink of every topic needs a numeric version column only for types
// Debezium makes: <schema>.<table>.<verb>, three names.
func TestDebeziumTypeIsThreeNames(t *testing.T) {
	for typ, want := range map[string]bool{
		"public.customers.update":    true,
		"inventory.orders.read":      true,
		"com.example.invoice.update": false,
		"customers.update":           false,
		".customers.delete":          false,
		"public.customers.updated":   false,
	} {
		require.Equal(t, want, debeziumType(typ), typ)
	}
}
