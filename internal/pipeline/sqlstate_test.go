package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/effectively-io/effectively/event"
)

func TestEventFaultClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code   string
		name   string
		reason event.Reason // "" means retried
	}{
		{"08006", "connection_failure", ""},
		{"08P01", "protocol_violation", ""},
		{"0A000", "feature_not_supported", ""},
		{"21000", "cardinality_violation", ReasonCardinalityViolation},
		{"22001", "string_data_right_truncation", ReasonDataException},
		{"22003", "numeric_value_out_of_range", ReasonDataException},
		{"22P05", "untranslatable_character", ReasonDataException},
		{"23502", "not_null_violation", ReasonIntegrityConstraintViolation},
		{"23503", "foreign_key_violation", ReasonIntegrityConstraintViolation},
		{"23505", "unique_violation", ReasonIntegrityConstraintViolation},
		{"23514", "check_violation", ReasonIntegrityConstraintViolation},
		{"25006", "read_only_sql_transaction", ""},
		{"25P02", "in_failed_sql_transaction", ""},
		{"28P01", "invalid_password", ""},
		{"3D000", "invalid_catalog_name", ""},
		{"3F000", "invalid_schema_name", ""},
		{"40001", "serialization_failure", ""},
		{"40P01", "deadlock_detected", ""},
		{"42501", "insufficient_privilege", ""},
		{"42601", "syntax_error", ""},
		{"42703", "undefined_column", ""},
		{"42P01", "undefined_table", ""},
		{"44000", "with_check_option_violation", ReasonWithCheckOptionViolation},
		{"53100", "disk_full", ""},
		{"53200", "out_of_memory", ""},
		{"53300", "too_many_connections", ""},
		{"54000", "program_limit_exceeded (index row size)", ReasonProgramLimitExceeded},
		{"54001", "statement_too_complex (stack depth)", ReasonProgramLimitExceeded},
		{"54011", "too_many_columns", ReasonProgramLimitExceeded},
		{"55P03", "lock_not_available (lock_timeout)", ""},
		{"57014", "query_canceled (statement_timeout)", ""},
		{"57P01", "admin_shutdown", ""},
		{"58030", "io_error", ""},
		{"P0001", "raise_exception", ""},
		{"XX001", "data_corrupted", ""},
		{"ZZ999", "a class PostgreSQL does not define", ""},
		{"2200", "a malformed code", ""},
	}
	for _, tc := range tests {
		t.Run(tc.code+" "+tc.name, func(t *testing.T) {
			t.Parallel()
			err := fmt.Errorf("applying 3 events: %w", &pgconn.PgError{Code: tc.code, Message: tc.name})
			reason, fault := eventFault(err)
			require.Equal(t, tc.reason != "", fault)
			require.Equal(t, tc.reason, reason)
			if fault {
				require.Contains(t, EventFaultReasons(), reason)
			}
		})
	}
	for _, err := range []error{nil, io.ErrUnexpectedEOF, context.DeadlineExceeded, context.Canceled, errors.New("conn closed")} {
		_, fault := eventFault(err)
		require.False(t, fault, "%v", err)
	}
	// Every reason is some class's.
	for _, r := range EventFaultReasons() {
		found := false
		for _, cr := range eventFaultClasses {
			found = found || cr == r
		}
		require.True(t, found, r)
	}
}
