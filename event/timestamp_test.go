package event

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string // RFC 3339 in UTC; "" when refused
	}{
		{"2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z"},
		{"2024-01-01t00:00:00z", "2024-01-01T00:00:00Z"},
		{"2024-01-01T00:00:00.123456789+02:00", "2023-12-31T22:00:00.123456789Z"},
		{"2024-01-01T00:00:00-00:00", "2024-01-01T00:00:00Z"},
		{"2024-01-01T00:00:00+23:59", "2023-12-31T00:01:00Z"},
		{"2024-01-01T00:00:00+24:00", ""},
		{"2024-01-01T00:00:00+23:60", ""},
		{"2024-01-01T00:00:00-99:99", ""},
		{"2024-01-01T00:00:00,5Z", ""},
		{"2024-01-01T00:00:00.Z", ""},
		{"2024-01-01T00:00:00.1234567890Z", ""},
		{"2024-01-01 00:00:00Z", ""},
		{"2024-01-01T24:00:00Z", ""},
		{"2024-02-30T00:00:00Z", ""},
		{"2024-01-01T00:00:60Z", ""},
		{"2024-01-01T00:00:00", ""},
		{"2024-01-01T00:00:00+0200", ""},
		{"0001-01-01T00:00:00+01:00", ""}, // year 0 in UTC
		{"9999-12-31T23:00:00-01:00", ""}, // year 10000 in UTC
		{"0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"},
		{"+2024-01-01T00:00:00Z", ""},
		{"2024-01-01T00:00:00Z\x00", ""},
		{"２０２４-01-01T00:00:00Z", ""},
		{"", ""},
	} {
		got, err := ParseTime(tc.in)
		if tc.want == "" {
			require.Error(t, err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, time.UTC, got.Location(), "%q", tc.in)
		require.Equal(t, tc.want, got.Format(time.RFC3339Nano), "%q", tc.in)
		// Whatever passes can be encoded again (a parked event holds it).
		_, err = json.Marshal(got)
		require.NoError(t, err, "%q", tc.in)
	}
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2024-01-01T00:00:00Z", "2024-01-01T00:00:00+24:00", "2024-01-01T00:00:00.5-03:30", "9999-12-31T23:59:59.999999999Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s)
		if err != nil {
			return
		}
		if got.Location() != time.UTC {
			t.Fatalf("%q: not UTC", s)
		}
		if _, err := json.Marshal(got); err != nil {
			t.Fatalf("%q passed but cannot be encoded: %v", s, err)
		}
		if back, err := ParseTime(got.Format(time.RFC3339Nano)); err != nil || !back.Equal(got) {
			t.Fatalf("%q: round trip %v %v", s, back, err)
		}
	})
}
