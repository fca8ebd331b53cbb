package broker

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
)

// SchemaRegistry builds the schema registry client of schema_registry.*:
// franz-go's sr client on an HTTP client of its own, every request bounded
// by schema_registry.timeout, credentials read from their files at every
// request (a rotated password applies without a restart).
func SchemaRegistry(cfg config.SchemaRegistry, userAgent string, log *zap.Logger) (*sr.Client, error) {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = config.SchemaRegistryTimeoutDefault
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	t := cfg.TLS
	if t.CAFile != "" || t.CertFile != "" || t.ServerName != "" {
		tc, err := TLSConfig("schema_registry.tls", t)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = tc
	}
	opts := []sr.ClientOpt{
		sr.URLs(cfg.URL),
		sr.HTTPClient(&http.Client{Transport: tr, Timeout: timeout}),
		sr.UserAgent(userAgent),
	}
	var password, token *secretFile
	if cfg.PasswordFile != "" {
		password = &secretFile{key: "schema_registry.password_file", path: cfg.PasswordFile, log: log}
		if _, err := password.read(); err != nil {
			return nil, err
		}
	}
	if cfg.BearerTokenFile != "" {
		token = &secretFile{key: "schema_registry.bearer_token_file", path: cfg.BearerTokenFile, log: log}
		if _, err := token.read(); err != nil {
			return nil, err
		}
	}
	user := cfg.Username
	opts = append(opts, sr.PreReq(func(req *http.Request) error {
		switch {
		case password != nil:
			pw, err := password.read()
			if err != nil {
				return err
			}
			req.SetBasicAuth(user, pw)
		case token != nil:
			tok, err := token.read()
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		return nil
	}))
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema_registry.url %s: %w; fix: set schema_registry.url (env %s) to the registry's base URL", cfg.URL, err, config.EnvName("schema_registry.url"))
	}
	return cl, nil
}
