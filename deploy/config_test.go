package deploy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/effectively-io/effectively/internal/proctest"
	"github.com/effectively-io/effectively/internal/stacktest"
)

// TestChartConfigIsAcceptedByTheWorker hands what the chart gives a pod —
// the ConfigMap's file and the container's environment, with the mounted
// Secrets' paths pointing at files of the same kind — to the real binary's
// `effectively config`, which loads and validates it as `run` and `migrate`
// do (unknown keys in the file, bad values and unreadable or malformed
// secret files are errors), for every values combination. So the chart
// cannot drift from the configuration keys, and the pod name really becomes
// kafka.instance_id.
func TestChartConfigIsAcceptedByTheWorker(t *testing.T) {
	bin := buildBinary(t)
	ch := loadChart(t)
	pki := newTestPKI(t)
	for _, c := range combinations(t) {
		t.Run(c.name, func(t *testing.T) {
			r, err := render(t, ch, c.values)
			require.NoError(t, err)
			cm := r.one(t, "ConfigMap").obj.(*corev1.ConfigMap)
			sts := r.one(t, "StatefulSet").obj.(*appsv1.StatefulSet)
			worker := container(t, sts.Spec.Template.Spec, "worker")
			dir := t.TempDir()
			cfgPath := filepath.Join(dir, "config.yaml")
			require.NoError(t, os.WriteFile(cfgPath, []byte(cm.Data["config.yaml"]), 0o600))

			eff := effectiveConfig(t, bin, podEnv(t, worker, dir, pki), "--config", cfgPath)
			require.Equal(t, "effectively-0", get(eff, "kafka.instance_id"), "the pod name is kafka.instance_id")
			require.Equal(t, "0.0.0.0:9090", get(eff, "http.addr"))
			require.Equal(t, r.str("kafka.group"), get(eff, "kafka.group"))
			require.Equal(t, strings.ToLower(r.str("kafka.sasl.mechanism")), get(eff, "kafka.sasl.mechanism"), "Kafka's spelling is the worker's, lower case")
			require.Equal(t, envOf(worker)["EFFECTIVELY_KAFKA_LEAVE_ON_SHUTDOWN"].Value, get(eff, "kafka.leave_on_shutdown"))
			require.Contains(t, get(eff, "postgres.url"), "//"+r.str("postgres.worker.user")+":xxxxx@", "the worker connects as the worker role, with the password from its file")

			// The migrate Job's environment alone (it has no ConfigMap).
			job := r.one(t, "Job").obj.(*batchv1.Job)
			migrate := container(t, job.Spec.Template.Spec, "migrate")
			eff = effectiveConfig(t, bin, podEnv(t, migrate, dir, pki))
			require.Contains(t, get(eff, "postgres.url"), "//"+r.str("postgres.owner.user")+":xxxxx@", "migrate connects as the owner, with the password from its file")
		})
	}
}

// effectiveConfig runs `effectively config` and returns what it printed.
func effectiveConfig(t *testing.T, bin string, env []string, args ...string) map[string]any {
	t.Helper()
	code, stdout, stderr := proctest.Run(t, bin, env, append([]string{"config"}, args...)...)
	require.Equal(t, 0, code, "effectively config refuses what the chart gives the pod:\n%s\nenvironment: %s", stderr, strings.Join(env, " "))
	var out map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(stdout), &out))
	return out
}

func get(m map[string]any, path string) string {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = mm[k]
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// podEnv turns a container's environment into a process environment: the
// downward API's pod name becomes "effectively-0", and every path under
// /etc/effectively/secrets/ a file in dir with content of its kind.
func podEnv(t *testing.T, c corev1.Container, dir string, pki testPKI) []string {
	t.Helper()
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			require.NotNil(t, e.ValueFrom.FieldRef, e.Name)
			require.Equal(t, "metadata.name", e.ValueFrom.FieldRef.FieldPath, e.Name)
			v = "effectively-0"
		}
		env = append(env, e.Name+"="+localSecrets(t, v, dir, pki))
	}
	return env
}

// localSecrets rewrites every mounted-secret path in v to a local file.
func localSecrets(t *testing.T, v, dir string, pki testPKI) string {
	t.Helper()
	const root = "/etc/effectively/secrets/"
	for {
		i := strings.Index(v, root)
		if i < 0 {
			return v
		}
		end := strings.IndexAny(v[i:], "&? ")
		if end < 0 {
			end = len(v) - i
		}
		path := v[i : i+end]
		local := filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(path, root), "/", "_"))
		content := "s3cret\n"
		switch filepath.Base(path) {
		case "ca.crt":
			content = pki.caPEM
		case "tls.crt":
			content = pki.certPEM
		case "tls.key":
			content = pki.keyPEM
		}
		require.NoError(t, os.WriteFile(local, []byte(content), 0o600))
		v = v[:i] + local + v[i+end:]
	}
}

// testPKI is a CA and a client certificate it signed, in PEM.
type testPKI struct{ caPEM, certPEM, keyPEM string }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "worker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	enc := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	return testPKI{caPEM: enc("CERTIFICATE", caDER), certPEM: enc("CERTIFICATE", der), keyPEM: enc("PRIVATE KEY", keyDER)}
}

// TestComposeStillMatches: docker-compose.yml (the laptop path) runs the
// images the tests use, and its worker's environment is configuration the
// binary accepts, with the admin server reachable from the host.
func TestComposeStillMatches(t *testing.T) {
	bin := buildBinary(t)
	b, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Image       string            `json:"image"`
			Environment map[string]string `json:"environment"`
			Ports       []string          `json:"ports"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &compose))
	require.Equal(t, stacktest.PostgresImage, compose.Services["postgres"].Image)
	require.Equal(t, stacktest.KafkaImage, compose.Services["kafka"].Image)
	worker, ok := compose.Services["worker"]
	require.True(t, ok, "docker-compose.yml has a worker")
	var env []string
	for k, v := range worker.Environment {
		env = append(env, k+"="+v)
	}
	eff := effectiveConfig(t, bin, env)
	_, port, _ := strings.Cut(get(eff, "http.addr"), ":")
	require.Equal(t, "0.0.0.0:"+port, get(eff, "http.addr"), "the worker's admin server listens beyond the container")
	require.Contains(t, worker.Ports, "127.0.0.1:"+port+":"+port, "the admin port is published to the host")
}
