package broker

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/effectively-io/effectively/config"
)

// secretFile is a password or token kept in a file that something else
// rotates (a secrets operator, a token refresher). It is read at every
// authentication — a few hundred bytes per new broker connection — so the
// next connection uses what the file holds now; a changed content is
// logged (never the content itself).
type secretFile struct {
	key  string // the configuration key naming the file, for messages
	path string
	log  *zap.Logger

	mu   sync.Mutex
	sum  [sha256.Size]byte
	seen bool
}

// read returns the file's content without surrounding white space (a
// trailing newline written by echo or a Kubernetes secret is not part of a
// password).
func (f *secretFile) read() (string, error) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return "", fmt.Errorf("reading %s %s: %w; fix: point %s (env %s) at a readable file", f.key, f.path, err, f.key, config.EnvName(f.key))
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s %s %w; fix: write the secret into it, or point %s (env %s) at the right file", f.key, f.path, errEmptySecret, f.key, config.EnvName(f.key))
	}
	sum := sha256.Sum256([]byte(s))
	f.mu.Lock()
	changed := f.seen && sum != f.sum
	f.sum, f.seen = sum, true
	f.mu.Unlock()
	if changed {
		f.log.Info("secret file changed; new connections authenticate with its new content", zap.String("key", f.key), zap.String("path", f.path))
	}
	return s, nil
}
