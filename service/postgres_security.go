package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
)

// weakPostgresTLS finds the first host of url that is not local and that
// the connection reaches with less than sslmode=verify-full, and names the
// sslmode it amounts to. It reads what pgx will do (the URL or DSN, PG*
// environment variables, multiple hosts) rather than the sslmode text, so
// require with an sslrootcert is reported as the verify-ca it acts as. An
// unparseable url is not reported: connecting reports it.
func weakPostgresTLS(url string) (addr, mode string, weak bool) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return "", "", false
	}
	// pgx tries the main config and then its fallbacks in order; sslmode
	// allow and prefer are two attempts at one host, with and without TLS.
	type attempt struct {
		addr string
		tls  *tls.Config
	}
	attempts := []attempt{{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), cfg.TLSConfig}}
	for _, fb := range cfg.Fallbacks {
		attempts = append(attempts, attempt{net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))), fb.TLSConfig})
	}
	var order []string
	byAddr := map[string][]*tls.Config{}
	for _, a := range attempts {
		if _, ok := byAddr[a.addr]; !ok {
			order = append(order, a.addr)
		}
		byAddr[a.addr] = append(byAddr[a.addr], a.tls)
	}
	for _, a := range order {
		host, _, _ := net.SplitHostPort(a)
		if localPostgresHost(host) {
			continue
		}
		if m := sslMode(byAddr[a]); m != "verify-full" {
			return a, m, true
		}
	}
	return "", "", false
}

// localPostgresHost reports whether host is a unix socket or a loopback
// address, where no network lies between the worker and the server.
func localPostgresHost(host string) bool {
	if strings.HasPrefix(host, "/") || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sslMode names the sslmode that pgx's attempts at one host amount to.
func sslMode(attempts []*tls.Config) string {
	var plain, encrypted bool
	for _, c := range attempts {
		if c == nil {
			plain = true
		} else {
			encrypted = true
		}
	}
	switch {
	case !encrypted:
		return "disable"
	case plain && attempts[0] == nil:
		return "allow"
	case plain:
		return "prefer"
	}
	for _, c := range attempts {
		if c.InsecureSkipVerify {
			// verify-ca checks the chain itself and skips the host name.
			if c.VerifyPeerCertificate != nil {
				return "verify-ca"
			}
			return "require"
		}
	}
	return "verify-full"
}

// sslModeRisk says what an attacker on the network can do under mode.
var sslModeRisk = map[string]string{
	"disable":   "no TLS: the password and every event cross the network readable and alterable",
	"allow":     "TLS only if the server insists, and its certificate is not checked: anyone on the path can read and alter the session",
	"prefer":    "TLS can be stripped by anyone on the path, and the server's certificate is not checked",
	"require":   "the server's certificate is not checked: anyone on the path can pose as the server",
	"verify-ca": "the server's name is not checked: any server holding a certificate from that CA can pose as this one",
}

// warnPostgresTLS logs, once per command, that postgres.url reaches a
// server over the network without sslmode=verify-full.
func warnPostgresTLS(log *zap.Logger, url string) {
	addr, mode, weak := weakPostgresTLS(url)
	if !weak {
		return
	}
	log.Warn("postgres.url reaches a PostgreSQL server that is not local with sslmode="+mode+": "+sslModeRisk[mode],
		zap.String("postgres", addr), zap.String("sslmode", mode),
		zap.String("fix", "add sslmode=verify-full&sslrootcert=<PEM file of the server's CA> to postgres.url / "+
			config.EnvName("postgres.url")+" (docs/security.md)"))
}

// explainPostgresTLS turns a TLS failure of a connection to postgres.url,
// or a URL pgx cannot use (a certificate file it cannot read), into an
// error that names the setting to fix; other errors give nil.
func explainPostgresTLS(url string, err error) error {
	env := config.EnvName("postgres.url")
	var (
		unknownCA x509.UnknownAuthorityError
		badName   x509.HostnameError
		invalid   x509.CertificateInvalidError
		pgErr     *pgconn.PgError
		parse     *pgconn.ParseConfigError
	)
	switch {
	case errors.As(err, &parse):
		// pgx masks password and sslpassword in the message.
		return fmt.Errorf("postgres.url cannot be used: %w; fix: correct postgres.url / %s (the files its sslrootcert, sslcert and sslkey name must exist and be readable; docs/security.md)",
			err, env)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("PostgreSQL at %s presented a certificate that the CA file named by sslrootcert in postgres.url does not trust (without sslrootcert: the system's CAs): %w; "+
			"fix: set sslrootcert in postgres.url / %s to the PEM file of the CA that signed the server's certificate", pgAddr(url), err, env)
	case errors.As(err, &badName):
		return fmt.Errorf("PostgreSQL at %s presented a certificate that is not valid for the host postgres.url names: %w; "+
			"fix: set the host in postgres.url / %s to a name the certificate holds, or reissue the server's certificate for it", pgAddr(url), err, env)
	case errors.As(err, &invalid):
		return fmt.Errorf("PostgreSQL at %s presented a certificate that cannot be used: %w; fix: renew the server's certificate (ssl_cert_file)", pgAddr(url), err)
	case strings.Contains(err.Error(), "server refused TLS connection"):
		return fmt.Errorf("PostgreSQL at %s does not offer TLS, and the sslmode in postgres.url requires it: %w; "+
			"fix: turn ssl on in the server (ssl = on, ssl_cert_file, ssl_key_file)", pgAddr(url), err)
	case errors.As(err, &pgErr) && pgErr.Code == "28000" && strings.Contains(pgErr.Message, "no encryption"):
		return fmt.Errorf("PostgreSQL at %s accepts only TLS connections: %w; fix: add sslmode=verify-full&sslrootcert=<PEM file of the server's CA> to postgres.url / %s",
			pgAddr(url), err, env)
	}
	return nil
}

// explainMigratePrivilege turns a privilege PostgreSQL refused to migrate
// (SQLSTATE 42501) into an error that names the privilege and the fix:
// migrations run as the owner, not as the worker's DML-only role.
func explainMigratePrivilege(url string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgInsufficientPrivilege {
		return err
	}
	missing := pgErr.Message
	if obj, ok := strings.CutPrefix(pgErr.Message, "permission denied for schema "); ok {
		missing = "CREATE on schema " + obj
	} else if obj, ok := strings.CutPrefix(pgErr.Message, "must be owner of "); ok {
		missing = "ownership of " + obj
	}
	return fmt.Errorf("%w; the role %s lacks %s, which migrate needs; fix: run migrate as the role that owns the schema "+
		"(the worker's role needs only the DML grants in docs/security.md)", err, pgRole(url), missing)
}

// workerPrivilegeDenied explains a privilege refused to a command that
// only reads and writes rows: its role lacks the worker's grants.
func workerPrivilegeDenied(url string, err error) error {
	var pgErr *pgconn.PgError
	errors.As(err, &pgErr)
	return fmt.Errorf("the role %s in postgres.url may not use the schema's tables: %w; fix: as the schema's owner, grant it the worker's privileges that docs/security.md lists (GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA …, and ALTER DEFAULT PRIVILEGES)",
		pgRole(url), pgErr)
}

func pgRole(url string) string {
	if cfg, err := pgconn.ParseConfig(url); err == nil {
		return cfg.User
	}
	return "(unknown)"
}

// pgInsufficientPrivilege is SQLSTATE 42501.
const pgInsufficientPrivilege = "42501"

// privilegeDenied reports whether PostgreSQL refused err's statement for a
// missing privilege.
func privilegeDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgInsufficientPrivilege
}
