package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/nodectl/api"
)

const validConfig = `{
  "apiVersion": "nodectl.sandbox-pool.io/v1",
  "pool": {"name": "placeholder-node-a", "uid": "6f1c1f0e-0000-4000-8000-000000000001"},
  "generation": 3,
  "resources": {"cpu": "500m", "memory": "64Mi", "example.com/gpu": "1", "hugepages-2Mi": "0"}
}`

func TestParseConfigValid(t *testing.T) {
	cfg, err := api.ParseConfig([]byte(validConfig))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if cfg.Pool.Name != "placeholder-node-a" || cfg.Generation != 3 {
		t.Errorf("pool/generation = %+v/%d", cfg.Pool, cfg.Generation)
	}
	if got := cfg.CPUMilli(); got != 500 {
		t.Errorf("CPUMilli = %d, want 500", got)
	}
	if got := cfg.MemoryBytes(); got != 64<<20 {
		t.Errorf("MemoryBytes = %d, want %d", got, 64<<20)
	}
	if got := cfg.Resources["example.com/gpu"]; got != "1" {
		t.Errorf("extended resource = %q, want it passed through", got)
	}
}

func TestQuantitiesRoundUp(t *testing.T) {
	cfg := api.Config{Resources: map[string]string{"cpu": "0.0105", "memory": "1.5Mi"}}
	if got := cfg.CPUMilli(); got != 11 {
		t.Errorf("CPUMilli(0.0105) = %d, want 11 (rounded up)", got)
	}
	if got := cfg.MemoryBytes(); got != 1572864 {
		t.Errorf("MemoryBytes(1.5Mi) = %d, want 1572864", got)
	}
}

func TestParseConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		field      string // "" for a file-level error
		detail     string
	}{
		{"not JSON", `{"apiVersion":`, "", "not a JSON config object"},
		{"trailing data", validConfig + `{}`, "", "trailing data"},
		{"array", `[]`, "", "not a JSON config object"},
		{"unknown field", strings.Replace(validConfig, `"generation"`, `"zone": "a", "generation"`, 1), "zone", "unknown field"},
		{"unknown nested field", strings.Replace(validConfig, `"name"`, `"namespace": "x", "name"`, 1), "namespace", "unknown field"},
		{"generation as string", strings.Replace(validConfig, `"generation": 3`, `"generation": "3"`, 1), "generation", "must be a JSON integer"},
		{"resource as number", strings.Replace(validConfig, `"cpu": "500m"`, `"cpu": 1`, 1), "resources", "must be a JSON string"},
		{"wrong apiVersion", strings.Replace(validConfig, "/v1", "/v2", 1), "apiVersion", "supported values"},
		{"missing pool name", strings.Replace(validConfig, `"placeholder-node-a"`, `""`, 1), "pool.name", "Required"},
		{"missing pool uid", strings.Replace(validConfig, `"6f1c1f0e-0000-4000-8000-000000000001"`, `""`, 1), "pool.uid", "Required"},
		{"generation zero", strings.Replace(validConfig, `"generation": 3`, `"generation": 0`, 1), "generation", "at least 1"},
		{"missing memory", strings.Replace(validConfig, `"memory": "64Mi", `, ``, 1), "resources[memory]", "Required"},
		{"missing cpu", strings.Replace(validConfig, `"cpu": "500m", `, ``, 1), "resources[cpu]", "Required"},
		{"bad memory quantity", strings.Replace(validConfig, `"64Mi"`, `"64MiB"`, 1), "resources[memory]", "must be a Kubernetes quantity"},
		{"bad cpu quantity", strings.Replace(validConfig, `"500m"`, `"half"`, 1), "resources[cpu]", "must be a Kubernetes quantity"},
		{"bad extended quantity", strings.Replace(validConfig, `"example.com/gpu": "1"`, `"example.com/gpu": "one"`, 1), "resources[example.com/gpu]", "must be a Kubernetes quantity"},
		{"negative extended", strings.Replace(validConfig, `"example.com/gpu": "1"`, `"example.com/gpu": "-1"`, 1), "resources[example.com/gpu]", "must not be negative"},
		{"cpu below the minimum quota", strings.Replace(validConfig, `"500m"`, `"9m"`, 1), "resources[cpu]", "at least 10m"},
		{"cpu zero", strings.Replace(validConfig, `"500m"`, `"0"`, 1), "resources[cpu]", "at least 10m"},
		{"cpu huge", strings.Replace(validConfig, `"500m"`, `"1e12"`, 1), "resources[cpu]", "at most"},
		{"memory unit-less", strings.Replace(validConfig, `"64Mi"`, `"64"`, 1), "resources[memory]", "at least 1Mi"},
		{"memory negative", strings.Replace(validConfig, `"64Mi"`, `"-64Mi"`, 1), "resources[memory]", "at least 1Mi"},
		{"memory huge", strings.Replace(validConfig, `"64Mi"`, `"8Ei"`, 1), "resources[memory]", "at most"},
		{"empty resource name", strings.Replace(validConfig, `"example.com/gpu"`, `""`, 1), "resources[]", "must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := api.ParseConfig([]byte(tc.json))
			var invalid *api.InvalidConfigError
			if !errors.As(err, &invalid) {
				t.Fatalf("ParseConfig error = %v, want *InvalidConfigError", err)
			}
			if got := invalid.Field(); got != tc.field {
				t.Errorf("Field() = %q, want %q (error: %v)", got, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.detail) {
				t.Errorf("error %q does not say %q", err, tc.detail)
			}
		})
	}
}

func TestValidateListsEveryViolationInOrder(t *testing.T) {
	cfg := api.Config{Resources: map[string]string{"memory": "x", "cpu": "y"}}
	err := cfg.Validate()
	var invalid *api.InvalidConfigError
	if !errors.As(err, &invalid) {
		t.Fatalf("Validate = %v, want *InvalidConfigError", err)
	}
	var fields []string
	for _, e := range invalid.Errors {
		fields = append(fields, e.Field)
	}
	want := []string{"apiVersion", "pool.name", "pool.uid", "generation", "resources[cpu]", "resources[memory]"}
	if strings.Join(fields, ",") != strings.Join(want, ",") {
		t.Errorf("fields = %v, want %v", fields, want)
	}
}

func TestErrorText(t *testing.T) {
	e := &api.Error{Message: "too small", Field: "resources[memory]", Reason: api.ReasonMemoryInUse}
	if got := e.Error(); got != "resources[memory]: too small" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&api.Error{Message: "gone"}).Error(); got != "gone" {
		t.Errorf("Error() without field = %q", got)
	}
}

func TestReasonHTTPStatus(t *testing.T) {
	for r, want := range map[api.Reason]int{
		api.ReasonConfigNotFound:   400,
		api.ReasonInvalidConfig:    400,
		api.ReasonMemoryInUse:      409,
		api.ReasonNotFound:         404,
		api.ReasonMethodNotAllowed: 405,
		api.ReasonCgroupError:      500,
	} {
		if got := r.HTTPStatus(); got != want {
			t.Errorf("%s.HTTPStatus() = %d, want %d", r, got, want)
		}
	}
}
