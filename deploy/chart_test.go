// Package deploy_test checks what deploy/ ships: the Helm chart renders, for
// every values combination docs/operations/kubernetes.md names, into
// manifests that decode strictly into the Kubernetes API types (and KEDA's
// against its CRDs' schemas), wired as the worker needs; and the Grafana
// dashboard's and the alert rules' queries parse and name only metrics a
// live worker exports.
package deploy_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = "helm/effectively"
	examplesDir = "helm/examples"
	kubeDoc     = "../docs/operations/kubernetes.md"
)

// manifest is one rendered object: its raw JSON and the typed value it
// decoded into.
type manifest struct {
	source string // the template it came from
	kind   string
	name   string
	raw    []byte // JSON
	obj    any
}

// rendered is a release's manifests, hooks included.
type rendered struct {
	values    map[string]any
	manifests []manifest
}

func (r rendered) all(kind string) []manifest {
	var out []manifest
	for _, m := range r.manifests {
		if m.kind == kind {
			out = append(out, m)
		}
	}
	return out
}

func (r rendered) one(t *testing.T, kind string) manifest {
	t.Helper()
	ms := r.all(kind)
	require.Len(t, ms, 1, "one %s expected", kind)
	return ms[0]
}

func (r rendered) has(kind string) bool { return len(r.all(kind)) > 0 }

// value reads a dotted path of the merged values (the chart's defaults
// under the overrides).
func (r rendered) value(path string) any {
	var v any = r.values
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func (r rendered) str(path string) string {
	v := r.value(path)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	return ch
}

// render installs the chart client-side (helm template) with overrides.
func render(t *testing.T, ch *chart.Chart, overrides map[string]any) (rendered, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.ReleaseName = "effectively"
	install.Namespace = "payments"
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	rel, err := install.Run(ch, overrides)
	if err != nil {
		return rendered{}, err
	}
	merged, err := chartutil.CoalesceValues(ch, overrides)
	require.NoError(t, err)
	r := rendered{values: merged}
	docs := rel.Manifest
	for _, h := range rel.Hooks {
		docs += "\n---\n# Source: " + h.Path + "\n" + h.Manifest
	}
	if os.Getenv("EFFECTIVELY_PRINT_MANIFESTS") != "" {
		t.Logf("rendered manifests:\n%s", docs)
	}
	for _, doc := range splitYAML(docs) {
		r.manifests = append(r.manifests, decode(t, doc))
	}
	return r, nil
}

// splitYAML splits a multi-document stream, dropping empty documents.
func splitYAML(s string) []string {
	var out []string
	for _, doc := range strings.Split("\n"+s, "\n---") {
		if strings.TrimSpace(stripComments(doc)) != "" {
			out = append(out, doc)
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// kinds maps each apiVersion/kind the chart may render to its Go type.
// KEDA's are checked against their CRDs' schemas instead (kedaSchema).
var kinds = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"batch/v1/Job":                            func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return &kedaObject{} },
	"keda.sh/v1alpha1/TriggerAuthentication":  func() any { return &kedaObject{} },
}

// kedaObject is a KEDA resource: its metadata decoded strictly, its spec
// validated against the CRD's schema.
type kedaObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              map[string]any `json:"spec"`
}

// decode turns one YAML document into JSON and decodes it strictly (unknown
// or duplicate fields, wrong case: errors) into its API type.
func decode(t *testing.T, doc string) manifest {
	t.Helper()
	source := ""
	if i := strings.Index(doc, "# Source: "); i >= 0 {
		source, _, _ = strings.Cut(doc[i+len("# Source: "):], "\n")
	}
	raw, err := yaml.YAMLToJSONStrict([]byte(doc))
	require.NoError(t, err, "%s: not YAML:\n%s", source, doc)
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(raw, &head))
	newObj, ok := kinds[head.APIVersion+"/"+head.Kind]
	require.True(t, ok, "%s: %s/%s is not a kind this test knows; add it to kinds", source, head.APIVersion, head.Kind)
	obj := newObj()
	strict, err := sigsjson.UnmarshalStrict(raw, obj)
	require.NoError(t, err, "%s", source)
	require.Empty(t, strict, "%s: %s %s does not match the API type:\n%s", source, head.Kind, head.Metadata.Name, doc)
	return manifest{source: source, kind: head.Kind, name: head.Metadata.Name, raw: raw, obj: obj}
}

// combination is a set of values the docs name.
type combination struct {
	name   string
	values map[string]any
}

// combinations are the chart's defaults and every file in helm/examples,
// each of which docs/operations/kubernetes.md must name, plus all of them
// merged (one release with everything on).
func combinations(t *testing.T) []combination {
	t.Helper()
	doc, err := os.ReadFile(kubeDoc)
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := []combination{{name: "defaults", values: map[string]any{}}}
	for _, f := range files {
		require.Contains(t, string(doc), "deploy/"+filepath.ToSlash(f), "docs/operations/kubernetes.md must name every example values file")
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var v map[string]any
		require.NoError(t, yaml.UnmarshalStrict(b, &v), f)
		out = append(out, combination{name: filepath.Base(f), values: v})
	}
	// Everything on at once: the SCRAM/TLS, monitoring and external-secret
	// examples merged.
	all := map[string]any{}
	for _, c := range out {
		switch c.name {
		case "sasl-scram-tls.yaml", "monitoring.yaml", "external-secrets.yaml":
			all = chartutil.MergeTables(deepCopy(t, c.values), all)
		}
	}
	return append(out, combination{name: "scram+monitoring+external-secrets", values: all})
}

func deepCopy(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	b, err := yaml.Marshal(v)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, yaml.Unmarshal(b, &out))
	return out
}

func TestChartRendersValidManifests(t *testing.T) {
	ch := loadChart(t)
	for _, c := range combinations(t) {
		t.Run(c.name, func(t *testing.T) {
			// helm lint --strict: the chart's own rules, warnings included.
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = "payments"
			res := lint.Run([]string{chartDir}, c.values)
			for _, m := range res.Messages {
				require.Less(t, m.Severity, support.WarningSev, "helm lint: %s", m)
			}
			require.Empty(t, res.Errors, "helm lint")
			r, err := render(t, ch, c.values)
			require.NoError(t, err)
			for _, m := range r.manifests {
				checkNames(t, m)
			}
			checkWorker(t, r)
			checkMigrateJob(t, r)
			checkService(t, r)
			checkPDB(t, r)
			checkKEDA(t, r)
			checkMonitoring(t, r)
		})
	}
}

// checkNames: object names are DNS subdomains, labels are valid.
func checkNames(t *testing.T, m manifest) {
	t.Helper()
	require.Empty(t, validation.IsDNS1123Subdomain(m.name), "%s name %q", m.kind, m.name)
	meta := reflect.ValueOf(m.obj).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
	for k, v := range meta.Labels {
		require.Empty(t, validation.IsQualifiedName(k), "%s label key %q", m.kind, k)
		require.Empty(t, validation.IsValidLabelValue(v), "%s label %s=%q", m.kind, k, v)
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

// checkPodSpec checks what any pod of the chart must get right: env names,
// mounts that name volumes, and every *_FILE setting pointing at a file a
// Secret volume provides (the Secret and key returned per env var).
func checkPodSpec(t *testing.T, spec corev1.PodSpec, c corev1.Container) map[string]secretFile {
	t.Helper()
	// Kubernetes would otherwise add a variable per Service of the
	// namespace (EFFECTIVELY_SERVICE_HOST, …) to the worker's settings'
	// namespace, EFFECTIVELY_*.
	require.NotNil(t, spec.EnableServiceLinks, "enableServiceLinks is set")
	require.False(t, *spec.EnableServiceLinks, "no Service variables in the environment")
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		require.Empty(t, validation.IsDNS1123Label(v.Name), "volume %q", v.Name)
		volumes[v.Name] = v
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		require.Empty(t, validation.IsEnvVarName(e.Name), "env %q", e.Name)
		require.False(t, seen[e.Name], "env %s set twice", e.Name)
		seen[e.Name] = true
		require.False(t, strings.HasSuffix(e.Name, "PASSWORD") || strings.HasSuffix(e.Name, "_TOKEN"),
			"%s: a secret's value in the environment; mount it as a file", e.Name)
	}
	for _, p := range c.Ports {
		require.Empty(t, validation.IsValidPortName(p.Name), "port %q", p.Name)
	}
	files := map[string]secretFile{}
	for name, e := range envOf(c) {
		if !strings.HasPrefix(name, "EFFECTIVELY_") || !strings.HasSuffix(name, "_FILE") {
			continue
		}
		files[name] = secretBehind(t, e.Value, c.VolumeMounts, volumes)
	}
	for _, m := range c.VolumeMounts {
		_, ok := volumes[m.Name]
		require.True(t, ok, "mount %s names no volume", m.Name)
	}
	// sslrootcert in postgres.url is a file too.
	if url := envOf(c)["EFFECTIVELY_POSTGRES_URL"].Value; strings.Contains(url, "sslrootcert=") {
		_, path, _ := strings.Cut(url, "sslrootcert=")
		path, _, _ = strings.Cut(path, "&")
		files["sslrootcert"] = secretBehind(t, path, c.VolumeMounts, volumes)
	}
	return files
}

// secretFile is where a file setting's content comes from.
type secretFile struct{ secret, key string }

// secretBehind finds the Secret volume item that provides path.
func secretBehind(t *testing.T, path string, mounts []corev1.VolumeMount, volumes map[string]corev1.Volume) secretFile {
	t.Helper()
	for _, m := range mounts {
		rel, ok := strings.CutPrefix(path, m.MountPath+"/")
		if !ok {
			continue
		}
		v := volumes[m.Name]
		require.NotNil(t, v.Secret, "%s is on volume %s, which is not a Secret", path, m.Name)
		for _, it := range v.Secret.Items {
			if it.Path == rel {
				return secretFile{secret: v.Secret.SecretName, key: it.Key}
			}
		}
		t.Fatalf("%s: Secret volume %s (Secret %s) has no item at %s", path, m.Name, v.Secret.SecretName, rel)
	}
	t.Fatalf("%s is under no volume mount", path)
	return secretFile{}
}

func checkWorker(t *testing.T, r rendered) {
	t.Helper()
	sts := r.one(t, "StatefulSet").obj.(*appsv1.StatefulSet)
	spec := sts.Spec.Template.Spec
	require.Equal(t, sts.Spec.Selector.MatchLabels, subset(sts.Spec.Template.Labels, sts.Spec.Selector.MatchLabels), "the selector matches the pod template")
	c := container(t, spec, "worker")
	env := envOf(c)

	// The pod name is the static member's instance ID.
	id := env["EFFECTIVELY_KAFKA_INSTANCE_ID"]
	require.NotNil(t, id.ValueFrom, "EFFECTIVELY_KAFKA_INSTANCE_ID must come from the downward API")
	require.NotNil(t, id.ValueFrom.FieldRef)
	require.Equal(t, "metadata.name", id.ValueFrom.FieldRef.FieldPath)

	// The admin server listens on every interface, on the port the probes use.
	host, port, err := net.SplitHostPort(env["EFFECTIVELY_HTTP_ADDR"].Value)
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0", host)
	var admin corev1.ContainerPort
	for _, p := range c.Ports {
		if p.Name == "admin" {
			admin = p
		}
	}
	require.Equal(t, port, strconv.Itoa(int(admin.ContainerPort)), "http.addr's port is the admin port")
	for probe, path := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz", c.StartupProbe: "/healthz"} {
		require.NotNil(t, probe)
		require.NotNil(t, probe.HTTPGet)
		require.Equal(t, path, probe.HTTPGet.Path)
		require.Equal(t, "admin", probe.HTTPGet.Port.String())
	}

	// Settings from the values reach the environment.
	require.Equal(t, strings.Join(toStrings(r.value("kafka.brokers")), ","), env["EFFECTIVELY_KAFKA_BROKERS"].Value)
	require.Equal(t, r.str("kafka.group"), env["EFFECTIVELY_KAFKA_GROUP"].Value)
	require.Equal(t, strings.Join(toStrings(r.value("kafka.topics")), ","), env["EFFECTIVELY_KAFKA_TOPICS"].Value)
	require.Equal(t, []string{"run", "--config", "/etc/effectively/config/config.yaml"}, c.Args)
	// A scale-down moves partitions at once where KEDA removes members.
	leave := r.value("keda.enabled") == true
	if v := r.str("kafka.leaveOnShutdown"); v != "" {
		leave = v == "true"
	}
	require.Equal(t, strconv.FormatBool(leave), env["EFFECTIVELY_KAFKA_LEAVE_ON_SHUTDOWN"].Value)

	// Credentials are files from the right Secrets; no password in the URL.
	files := checkPodSpec(t, spec, c)
	url := env["EFFECTIVELY_POSTGRES_URL"].Value
	require.True(t, strings.HasPrefix(url, "postgres://"+r.str("postgres.worker.user")+"@"), "the worker connects as the worker role: %s", url)
	require.Equal(t, secretFile{r.str("postgres.worker.existingSecret"), r.str("postgres.worker.passwordKey")}, files["EFFECTIVELY_POSTGRES_PASSWORD_FILE"])
	if s := r.str("postgres.tls.existingSecret"); s != "" {
		require.Equal(t, secretFile{s, r.str("postgres.tls.caKey")}, files["sslrootcert"])
	}
	// Kafka's spelling (SCRAM-SHA-512) is accepted and passed on as the
	// worker's.
	switch mech := strings.ReplaceAll(strings.ToLower(r.str("kafka.sasl.mechanism")), "_", "-"); mech {
	case "none":
		require.NotContains(t, env, "EFFECTIVELY_KAFKA_SASL_MECHANISM")
	case "oauthbearer":
		require.Equal(t, mech, env["EFFECTIVELY_KAFKA_SASL_MECHANISM"].Value)
		require.Equal(t, secretFile{r.str("kafka.sasl.existingSecret"), r.str("kafka.sasl.tokenKey")}, files["EFFECTIVELY_KAFKA_SASL_TOKEN_FILE"])
	default:
		require.Equal(t, mech, env["EFFECTIVELY_KAFKA_SASL_MECHANISM"].Value)
		require.Equal(t, r.str("kafka.sasl.username"), env["EFFECTIVELY_KAFKA_SASL_USERNAME"].Value)
		require.Equal(t, secretFile{r.str("kafka.sasl.existingSecret"), r.str("kafka.sasl.passwordKey")}, files["EFFECTIVELY_KAFKA_SASL_PASSWORD_FILE"])
	}
	if r.value("console.enabled") == true {
		require.Equal(t, "true", env["EFFECTIVELY_CONSOLE_ENABLED"].Value)
		require.Equal(t, secretFile{r.str("console.existingSecret"), r.str("console.tokensKey")}, files["EFFECTIVELY_CONSOLE_TOKEN_FILE"])
	} else {
		require.NotContains(t, env, "EFFECTIVELY_CONSOLE_ENABLED", "the console is off unless asked for")
	}
	if r.value("kafka.tls.enabled") == true {
		require.Equal(t, "true", env["EFFECTIVELY_KAFKA_TLS_ENABLED"].Value)
		if s := r.str("kafka.tls.existingSecret"); s != "" {
			require.Equal(t, secretFile{s, r.str("kafka.tls.caKey")}, files["EFFECTIVELY_KAFKA_TLS_CA_FILE"])
		}
		if r.value("kafka.tls.clientCert") == true {
			require.Equal(t, secretFile{r.str("kafka.tls.existingSecret"), r.str("kafka.tls.certKey")}, files["EFFECTIVELY_KAFKA_TLS_CERT_FILE"])
			require.Equal(t, secretFile{r.str("kafka.tls.existingSecret"), r.str("kafka.tls.keyKey")}, files["EFFECTIVELY_KAFKA_TLS_KEY_FILE"])
		}
	} else {
		require.NotContains(t, env, "EFFECTIVELY_KAFKA_TLS_ENABLED")
	}

	// The config file is the ConfigMap's, and the grace period outlasts the drain.
	cm := r.one(t, "ConfigMap").obj.(*corev1.ConfigMap)
	var cfg map[string]any
	require.NoError(t, yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &cfg))
	drain, err := time.ParseDuration(fmt.Sprint(cfg["shutdown"].(map[string]any)["drain_timeout"]))
	require.NoError(t, err)
	require.NotNil(t, spec.TerminationGracePeriodSeconds)
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	require.Greater(t, grace, drain+10*time.Second, "terminationGracePeriodSeconds must outlast shutdown.drain_timeout with room to leave the group")
	mountedConfig := false
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			mountedConfig = true
		}
	}
	require.True(t, mountedConfig, "the ConfigMap is mounted")
	require.NotEmpty(t, sts.Spec.Template.Annotations["checksum/config"], "a config change rolls the pods")

	// Resources cover the measured peak RSS (about 200 MiB at full speed).
	req := c.Resources.Requests.Memory()
	require.GreaterOrEqual(t, req.Value(), int64(220<<20), "memory request below the measured peak RSS")
	require.GreaterOrEqual(t, c.Resources.Limits.Memory().Value(), req.Value())
	// The GC's soft limit follows the container's limit, below it.
	if r.str("goMemLimit") == "" {
		mib, err := strconv.ParseInt(strings.TrimSuffix(env["GOMEMLIMIT"].Value, "MiB"), 10, 64)
		require.NoError(t, err, "GOMEMLIMIT %q", env["GOMEMLIMIT"].Value)
		limit := c.Resources.Limits.Memory().Value()
		require.InDelta(t, 0.85, float64(mib<<20)/float64(limit), 0.01, "GOMEMLIMIT %dMiB of a %d-byte limit", mib, limit)
	}

	// The headless Service is the StatefulSet's.
	svc := r.one(t, "Service").obj.(*corev1.Service)
	require.Equal(t, svc.Name, sts.Spec.ServiceName)
	require.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)

	// With KEDA the StatefulSet leaves replicas to it.
	if r.value("keda.enabled") == true {
		require.Nil(t, sts.Spec.Replicas, "KEDA owns the replica count: a chart upgrade must not reset it")
	} else {
		require.NotNil(t, sts.Spec.Replicas)
	}
}

func checkMigrateJob(t *testing.T, r rendered) {
	t.Helper()
	job := r.one(t, "Job").obj.(*batchv1.Job)
	require.Equal(t, "pre-install,pre-upgrade", job.Annotations["helm.sh/hook"], "migrations run before the workers start or change")
	spec := job.Spec.Template.Spec
	c := container(t, spec, "migrate")
	require.Equal(t, []string{"migrate"}, c.Args)
	files := checkPodSpec(t, spec, c)
	url := envOf(c)["EFFECTIVELY_POSTGRES_URL"].Value
	require.True(t, strings.HasPrefix(url, "postgres://"+r.str("postgres.owner.user")+"@"), "migrate runs as the owner role: %s", url)
	require.Equal(t, secretFile{r.str("postgres.owner.existingSecret"), r.str("postgres.owner.passwordKey")}, files["EFFECTIVELY_POSTGRES_PASSWORD_FILE"],
		"the migrate Job reads the owner's password")
	require.NotEqual(t, r.str("postgres.owner.existingSecret"), r.str("postgres.worker.existingSecret"))
	require.Equal(t, corev1.RestartPolicyNever, spec.RestartPolicy)
}

func checkService(t *testing.T, r rendered) {
	t.Helper()
	svc := r.one(t, "Service").obj.(*corev1.Service)
	sts := r.one(t, "StatefulSet").obj.(*appsv1.StatefulSet)
	require.Equal(t, svc.Spec.Selector, subset(sts.Spec.Template.Labels, svc.Spec.Selector), "the Service selects the worker pods")
	require.Len(t, svc.Spec.Ports, 1)
	require.Equal(t, "admin", svc.Spec.Ports[0].TargetPort.String())
}

func checkPDB(t *testing.T, r rendered) {
	t.Helper()
	pdb := r.one(t, "PodDisruptionBudget").obj.(*policyv1.PodDisruptionBudget)
	sts := r.one(t, "StatefulSet").obj.(*appsv1.StatefulSet)
	require.Equal(t, pdb.Spec.Selector.MatchLabels, subset(sts.Spec.Template.Labels, pdb.Spec.Selector.MatchLabels))
	require.NotNil(t, pdb.Spec.MaxUnavailable)
}

func checkKEDA(t *testing.T, r rendered) {
	t.Helper()
	if r.value("keda.enabled") != true {
		require.False(t, r.has("ScaledObject"))
		require.False(t, r.has("TriggerAuthentication"))
		return
	}
	m := r.one(t, "ScaledObject")
	validateKEDA(t, "scaledobjects", m)
	so := m.obj.(*kedaObject)
	sts := r.one(t, "StatefulSet").obj.(*appsv1.StatefulSet)
	target := so.Spec["scaleTargetRef"].(map[string]any)
	require.Equal(t, "StatefulSet", target["kind"])
	require.Equal(t, sts.Name, target["name"])
	maxReplicas, err := strconv.Atoi(fmt.Sprint(so.Spec["maxReplicaCount"]))
	require.NoError(t, err)
	partitions, err := strconv.Atoi(r.str("kafka.partitions"))
	require.NoError(t, err)
	require.LessOrEqual(t, maxReplicas, partitions, "maxReplicaCount must not exceed the partitions")
	triggers := so.Spec["triggers"].([]any)
	require.Len(t, triggers, len(toStrings(r.value("kafka.topics"))), "one trigger per topic")
	var auth string
	for i, tr := range triggers {
		tr := tr.(map[string]any)
		require.Equal(t, "kafka", tr["type"])
		md := tr["metadata"].(map[string]any)
		require.Equal(t, r.str("kafka.group"), md["consumerGroup"])
		require.Equal(t, toStrings(r.value("kafka.topics"))[i], md["topic"])
		require.Equal(t, strings.Join(toStrings(r.value("kafka.brokers")), ","), md["bootstrapServers"])
		require.Equal(t, "false", md["allowIdleConsumers"])
		if ref, ok := tr["authenticationRef"].(map[string]any); ok {
			auth = ref["name"].(string)
		}
	}
	if p := r.str("keda.pausedReplicas"); p != "" {
		require.Equal(t, p, so.Annotations["autoscaling.keda.sh/paused-replicas"])
	} else {
		require.NotContains(t, so.Annotations, "autoscaling.keda.sh/paused-replicas")
	}
	switch {
	case r.str("keda.authenticationRef") != "":
		require.Equal(t, r.str("keda.authenticationRef"), auth)
		require.False(t, r.has("TriggerAuthentication"))
	case r.has("TriggerAuthentication"):
		ta := r.one(t, "TriggerAuthentication")
		validateKEDA(t, "triggerauthentications", ta)
		require.Equal(t, ta.name, auth)
		// The scaler reads the worker's own Secrets.
		refs := map[string]secretFile{}
		for _, ref := range ta.obj.(*kedaObject).Spec["secretTargetRef"].([]any) {
			ref := ref.(map[string]any)
			refs[ref["parameter"].(string)] = secretFile{ref["name"].(string), ref["key"].(string)}
		}
		if r.str("kafka.sasl.mechanism") != "none" {
			require.Equal(t, secretFile{r.str("kafka.sasl.existingSecret"), r.str("kafka.sasl.passwordKey")}, refs["password"])
		}
		if r.value("kafka.tls.enabled") == true {
			require.Equal(t, secretFile{r.str("kafka.tls.existingSecret"), r.str("kafka.tls.caKey")}, refs["ca"])
		}
	default:
		require.Empty(t, auth)
		require.Equal(t, "none", r.str("kafka.sasl.mechanism"))
	}
}

func checkMonitoring(t *testing.T, r rendered) {
	t.Helper()
	if r.value("serviceMonitor.enabled") == true {
		sm := r.one(t, "ServiceMonitor").obj.(*monitoringv1.ServiceMonitor)
		svc := r.one(t, "Service").obj.(*corev1.Service)
		require.Equal(t, sm.Spec.Selector.MatchLabels, subset(svc.Labels, sm.Spec.Selector.MatchLabels), "the ServiceMonitor selects the Service")
		require.Len(t, sm.Spec.Endpoints, 1)
		require.Equal(t, svc.Spec.Ports[0].Name, sm.Spec.Endpoints[0].Port)
		require.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
	} else {
		require.False(t, r.has("ServiceMonitor"))
	}
	if r.value("prometheusRule.enabled") == true {
		pr := r.one(t, "PrometheusRule").obj.(*monitoringv1.PrometheusRule)
		// The rule file, as it is: the same groups, rules and expressions.
		b, err := os.ReadFile("prometheus/alerts.yaml")
		require.NoError(t, err)
		var file monitoringv1.PrometheusRuleSpec
		require.NoError(t, yaml.UnmarshalStrict(b, &file))
		require.Equal(t, file, pr.Spec)
		require.NotEmpty(t, pr.Spec.Groups[0].Rules)
	} else {
		require.False(t, r.has("PrometheusRule"))
	}
}

// GOMEMLIMIT is goMemLimitPercent of the container's memory limit, in MiB,
// whatever unit the limit is written in; goMemLimit fixes it, and
// goMemLimitPercent 0 (or no limit) leaves it unset.
func TestChartDerivesGOMEMLIMIT(t *testing.T) {
	ch := loadChart(t)
	for _, c := range []struct {
		values string
		want   string // "": not set
	}{
		{"", "326MiB"}, // 384Mi × 0.85 = 326.4
		{"resources: {limits: {memory: 1Gi}}", "870MiB"},
		{"resources: {limits: {memory: 1.5Gi}}", "1305MiB"},
		{"resources: {limits: {memory: 512M}}", "415MiB"}, // 435,200,000 bytes
		{"resources: {limits: {memory: 2G}}\ngoMemLimitPercent: 90", "1716MiB"},
		{"resources: {limits: {memory: 402653184}}", "326MiB"},
		{"resources: {limits: {memory: '402653184'}}", "326MiB"},
		{"goMemLimit: 300MiB", "300MiB"},
		{"goMemLimit: 300MiB\nresources: {limits: {memory: 1Gi}}", "300MiB"},
		{"goMemLimitPercent: 0", ""},
		{"resources: {limits: null}", ""},
	} {
		t.Run(c.values, func(t *testing.T) {
			var v map[string]any
			require.NoError(t, yaml.Unmarshal([]byte(c.values), &v))
			r, err := render(t, ch, v)
			require.NoError(t, err)
			sts := r.one(t, "StatefulSet").obj.(*appsv1.StatefulSet)
			got, ok := envOf(container(t, sts.Spec.Template.Spec, "worker"))["GOMEMLIMIT"]
			require.Equal(t, c.want != "", ok, "GOMEMLIMIT set")
			require.Equal(t, c.want, got.Value)
		})
	}
}

// TestChartRefusesWhatCannotWork: values that would deploy something broken
// fail the render with a message naming the value.
func TestChartRefusesWhatCannotWork(t *testing.T) {
	ch := loadChart(t)
	for _, c := range []struct {
		name   string
		values string
		want   string
	}{
		{"more KEDA replicas than partitions", "kafka: {partitions: 4}\nkeda: {enabled: true, maxReplicaCount: 6}", "keda.maxReplicaCount 6 exceeds kafka.partitions 4"},
		{"SASL without its Secret", "kafka: {sasl: {mechanism: scram-sha-256, username: worker}}", "kafka.sasl.existingSecret"},
		{"SASL password without a user", "kafka: {sasl: {mechanism: plain, existingSecret: s}}", "kafka.sasl.username"},
		{"mutual TLS without the client Secret", "kafka: {tls: {enabled: true, clientCert: true}}", "kafka.tls.existingSecret"},
		{"KEDA with OAUTHBEARER and no TriggerAuthentication", "kafka: {sasl: {mechanism: oauthbearer, existingSecret: s}}\nkeda: {enabled: true}", "keda.authenticationRef"},
		{"no owner Secret for migrate", "postgres: {owner: {existingSecret: ''}}", "existingSecret"},
		{"a misspelt value (values.schema.json)", "keda: {enabled: true, maxReplicas: 4}", "maxReplicas"},
		{"an unknown SASL mechanism (values.schema.json)", "kafka: {sasl: {mechanism: GSSAPI, existingSecret: s, username: u}}", "/kafka/sasl/mechanism"},
		{"a partition count that is not a number", "kafka: {partitions: eight}", "partitions"},
		{"a memory limit GOMEMLIMIT cannot be derived from", "resources: {limits: {memory: 1e3Mi}}", "resources.limits.memory \"1e3Mi\""},
		{"a memory limit too small for any GOMEMLIMIT", "resources: {limits: {memory: 1Ki}}", "GOMEMLIMIT under 1 MiB"},
		{"a GOMEMLIMIT share above the limit (values.schema.json)", "goMemLimitPercent: 120", "goMemLimitPercent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var v map[string]any
			require.NoError(t, yaml.Unmarshal([]byte(c.values), &v))
			_, err := render(t, ch, v)
			require.ErrorContains(t, err, c.want)
		})
	}
}

// subset returns the entries of m whose keys are in keys (to compare a
// selector with the labels it must match).
func subset(m, keys map[string]string) map[string]string {
	out := map[string]string{}
	for k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

func toStrings(v any) []string {
	var out []string
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			out = append(out, fmt.Sprint(e))
		}
	case []string:
		out = slices.Clone(v)
	}
	return out
}
