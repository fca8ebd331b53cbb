package service

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// clearPGEnv keeps the developer's PG* variables, which pgx reads, out of
// a test.
func clearPGEnv(t *testing.T) {
	for _, k := range []string{"PGHOST", "PGPORT", "PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGSSLNEGOTIATION", "PGSERVICE", "PGSERVICEFILE"} {
		t.Setenv(k, "")
	}
}

func testCAFile(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return path
}

// The start-up warning's decision: a host that is not local reached with
// less than verify-full, whatever spelling (URL or DSN) says so.
func TestWeakPostgresTLS(t *testing.T) {
	clearPGEnv(t)
	ca := testCAFile(t)
	for _, tc := range []struct {
		url  string
		mode string // "" when no warning is due
		addr string
	}{
		// Local: no network in between, whatever the mode.
		{url: "postgres://u:p@localhost:5432/db?sslmode=disable"},
		{url: "postgres://u:p@127.0.0.1/db"},
		{url: "postgres://u:p@[::1]:5433/db?sslmode=require"},
		{url: "postgres://u:p@127.0.0.2/db?sslmode=disable"},
		{url: "host=/var/run/postgresql user=u dbname=db"},
		{url: "postgres:///db?host=/tmp"},
		// Remote, verified: no warning.
		{url: "postgres://u:p@db.example.com/db?sslmode=verify-full&sslrootcert=" + ca},
		{url: "host=db.example.com user=u sslmode=verify-full sslrootcert=" + ca},
		{url: "postgres://u:p@db.example.com/db?sslmode=verify-full"},
		{url: "postgres://u:p@db.example.com/db?sslrootcert=system"}, // libpq: system implies verify-full
		// Remote, weaker.
		{url: "postgres://u:p@db.example.com/db", mode: "prefer", addr: "db.example.com:5432"}, // the default
		{url: "postgres://u:p@db.example.com:6432/db?sslmode=disable", mode: "disable", addr: "db.example.com:6432"},
		{url: "postgres://u:p@10.0.0.5/db?sslmode=allow", mode: "allow", addr: "10.0.0.5:5432"},
		{url: "postgres://u:p@db.example.com/db?sslmode=prefer", mode: "prefer", addr: "db.example.com:5432"},
		{url: "postgres://u:p@db.example.com/db?sslmode=require", mode: "require", addr: "db.example.com:5432"},
		{url: "postgres://u:p@db.example.com/db?sslmode=verify-ca&sslrootcert=" + ca, mode: "verify-ca", addr: "db.example.com:5432"},
		// libpq: require with a root certificate acts as verify-ca.
		{url: "postgres://u:p@db.example.com/db?sslmode=require&sslrootcert=" + ca, mode: "verify-ca", addr: "db.example.com:5432"},
		{url: "host=db.example.com port=5433 user=u sslmode=require", mode: "require", addr: "db.example.com:5433"},
		{url: "host=db.example.com user=u", mode: "prefer", addr: "db.example.com:5432"},
		{url: "host=2001:db8::1 user=u sslmode=disable", mode: "disable", addr: "[2001:db8::1]:5432"},
		// Several hosts: the first remote one that is weak is named.
		{url: "postgres://u:p@localhost,db2.example.com/db?sslmode=require", mode: "require", addr: "db2.example.com:5432"},
		{url: "host=127.0.0.1,db2.example.com user=u sslmode=verify-full", mode: ""},
		// Unparseable: connecting reports it, not the warning.
		{url: "postgres://u:p@db.example.com/db?sslmode=bogus"},
		{url: "postgres://u:p@db.example.com/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			addr, mode, weak := weakPostgresTLS(tc.url)
			require.Equal(t, tc.mode != "", weak)
			require.Equal(t, tc.mode, mode)
			require.Equal(t, tc.addr, addr)
		})
	}

	t.Run("PGSSLMODE applies as pgx applies it", func(t *testing.T) {
		t.Setenv("PGSSLMODE", "verify-full")
		_, _, weak := weakPostgresTLS("postgres://u:p@db.example.com/db")
		require.False(t, weak)
		t.Setenv("PGSSLMODE", "require")
		_, mode, weak := weakPostgresTLS("postgres://u:p@db.example.com/db")
		require.True(t, weak)
		require.Equal(t, "require", mode)
	})
}

func TestWarnPostgresTLS(t *testing.T) {
	clearPGEnv(t)
	core, logs := observer.New(zap.WarnLevel)
	log := zap.New(core)
	warnPostgresTLS(log, "postgres://u:secret-pw@db.example.com/db?sslmode=require")
	warnPostgresTLS(log, "postgres://u:secret-pw@localhost/db?sslmode=disable")
	require.Equal(t, 1, logs.Len())
	e := logs.All()[0]
	require.Contains(t, e.Message, "postgres.url")
	require.Contains(t, e.Message, "sslmode=require")
	fields := e.ContextMap()
	require.Equal(t, "db.example.com:5432", fields["postgres"])
	require.Contains(t, fields["fix"], "sslmode=verify-full&sslrootcert=")
	require.Contains(t, fields["fix"], "EFFECTIVELY_POSTGRES_URL")
	require.NotContains(t, fmt.Sprint(e.Message, fields), "secret-pw")
}

func TestExplainMigratePrivilege(t *testing.T) {
	url := "postgres://effectively_worker:pw@db.example.com/db"
	err := fmt.Errorf("applying the effectively migrations: %w",
		&pgconn.PgError{Severity: "ERROR", Code: "42501", Message: "permission denied for schema effectively"})
	got := explainMigratePrivilege(url, err)
	require.ErrorIs(t, got, err)
	require.Contains(t, got.Error(), "effectively_worker lacks CREATE on schema effectively")
	require.Contains(t, got.Error(), "run migrate as the role that owns the schema")

	owner := &pgconn.PgError{Code: "42501", Message: "must be owner of table dead_letters"}
	require.Contains(t, explainMigratePrivilege(url, owner).Error(), "lacks ownership of table dead_letters")

	other := errors.New("connection reset")
	require.Equal(t, other, explainMigratePrivilege(url, other))
	require.False(t, privilegeDenied(other))
	require.True(t, privilegeDenied(err))
}

func TestExplainPostgresTLS(t *testing.T) {
	url := "postgres://u:p@db.example.com/db?sslmode=verify-full"
	unknown := fmt.Errorf("failed to connect: tls error: %w", x509.UnknownAuthorityError{})
	got := explainPostgresTLS(url, unknown)
	require.ErrorIs(t, got, unknown)
	require.Contains(t, got.Error(), "sslrootcert in postgres.url")
	require.Contains(t, got.Error(), "fix: set sslrootcert in postgres.url / EFFECTIVELY_POSTGRES_URL")

	name := fmt.Errorf("tls error: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "db.example.com"})
	require.Contains(t, explainPostgresTLS(url, name).Error(), "not valid for the host postgres.url names")

	noTLS := errors.New("failed to connect to `host=db.example.com`: server refused TLS connection")
	require.Contains(t, explainPostgresTLS(url, noTLS).Error(), "does not offer TLS")

	hba := &pgconn.PgError{Code: "28000", Message: `no pg_hba.conf entry for host "10.0.0.1", user "u", database "db", no encryption`}
	require.Contains(t, explainPostgresTLS(url, hba).Error(), "accepts only TLS connections")

	_, perr := pgconn.ParseConfig("postgres://u:hunter2@db.example.com/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
	require.Error(t, perr)
	parse := explainPostgresTLS(url, perr)
	require.Contains(t, parse.Error(), "postgres.url cannot be used")
	require.Contains(t, parse.Error(), "/nonexistent/ca.pem")
	require.Contains(t, parse.Error(), "EFFECTIVELY_POSTGRES_URL")
	require.NotContains(t, parse.Error(), "hunter2")

	require.NoError(t, explainPostgresTLS(url, errors.New("connection refused")))
	require.False(t, strings.Contains(got.Error(), ":p@"))
}

func TestWorkerPrivilegeDenied(t *testing.T) {
	pgErr := &pgconn.PgError{Code: "42501", Message: "permission denied for table effectively_schema_version"}
	err := workerPrivilegeDenied("postgres://effectively_worker:pw@db/x", fmt.Errorf("the database schema is not migrated: %w", pgErr))
	require.ErrorIs(t, err, pgErr)
	require.Contains(t, err.Error(), "the role effectively_worker in postgres.url may not use the schema's tables")
	require.Contains(t, err.Error(), "permission denied for table effectively_schema_version")
	require.NotContains(t, err.Error(), "not migrated")
}
