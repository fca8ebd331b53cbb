package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// KEDA's Go types are not served, so its resources are validated against
// the openAPIV3Schema of its CRDs, vendored from kedacore/keda v2.20.2
// (config/crd/bases) into testdata/keda. The API server prunes fields a
// structural schema does not name and `kubectl apply --validate=strict`
// rejects them; JSON Schema allows them unless told otherwise, so every
// object schema that lists its properties (and does not ask to preserve
// unknown fields) is closed with additionalProperties: false first.

var (
	kedaSchemas   = map[string]*jsonschema.Schema{}
	kedaSchemasMu sync.Mutex
)

func kedaSchema(t *testing.T, plural string) *jsonschema.Schema {
	t.Helper()
	kedaSchemasMu.Lock()
	defer kedaSchemasMu.Unlock()
	if s, ok := kedaSchemas[plural]; ok {
		return s
	}
	b, err := os.ReadFile(filepath.Join("testdata", "keda", "keda.sh_"+plural+".yaml"))
	require.NoError(t, err)
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema json.RawMessage `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(b, &crd))
	var raw json.RawMessage
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" {
			raw = v.Schema.OpenAPIV3Schema
		}
	}
	require.NotEmpty(t, raw, "%s: no v1alpha1 schema", plural)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	closeObjects(doc)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft4) // OpenAPI 3.0 schemas are draft-4-like
	url := "mem://keda/" + plural + ".json"
	require.NoError(t, c.AddResource(url, doc))
	s, err := c.Compile(url)
	require.NoError(t, err)
	kedaSchemas[plural] = s
	return s
}

// closeObjects sets additionalProperties: false on every object schema that
// names its properties and neither sets additionalProperties nor preserves
// unknown fields.
func closeObjects(v any) {
	switch v := v.(type) {
	case map[string]any:
		_, hasProps := v["properties"]
		_, hasAdditional := v["additionalProperties"]
		preserve, _ := v["x-kubernetes-preserve-unknown-fields"].(bool)
		if hasProps && !hasAdditional && !preserve {
			v["additionalProperties"] = false
		}
		for _, e := range v {
			closeObjects(e)
		}
	case []any:
		for _, e := range v {
			closeObjects(e)
		}
	}
}

// validateKEDA validates a rendered KEDA object against its CRD's schema.
func validateKEDA(t *testing.T, plural string, m manifest) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.raw))
	require.NoError(t, err)
	require.NoError(t, kedaSchema(t, plural).Validate(doc), "%s %s against KEDA's CRD schema:\n%s", m.kind, m.name, m.raw)
}

// The closed schema must catch a misspelt field (a test that cannot fail is
// a defect).
func TestKEDASchemaRejectsUnknownFields(t *testing.T) {
	for _, bad := range []string{
		`{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"x"},"spec":{"scaleTargetRef":{"name":"x"},"maxReplicas":3,"triggers":[]}}`,
		`{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"x"},"spec":{"scaleTargetRef":{"name":"x"},"triggers":[{"type":"kafka","metadata":{},"authRef":{"name":"a"}}]}}`,
		`{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"x"},"spec":{"scaleTargetRef":{"name":"x"},"maxReplicaCount":"8","triggers":[]}}`,
	} {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(bad)))
		require.NoError(t, err)
		require.Error(t, kedaSchema(t, "scaledobjects").Validate(doc), bad)
	}
	good := `{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"x"},"spec":{"scaleTargetRef":{"name":"x"},"maxReplicaCount":8,"triggers":[{"type":"kafka","metadata":{"topic":"a"}}]}}`
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(good)))
	require.NoError(t, err)
	require.NoError(t, kedaSchema(t, "scaledobjects").Validate(doc))
}
