package schema_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/agentcube/sandboxpool/schema"
)

// TestLabelSelectorAgreesWithKubernetes: the schema accepts a class's selector exactly when
// Kubernetes' own label-selector validation does and the controller can turn it into a
// labels.Selector, so `cue vet`, `sandboxpool vet`, the webhook and the controller agree. A
// rejected selector is reported at the field that breaks the rule; a bad matchLabels key,
// as Kubernetes reports it, at the map, with the key as the value.
func TestLabelSelectorAgreesWithKubernetes(t *testing.T) {
	s := mustSchema(t)
	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		name     string
		selector string
		field    string // the field the schema names; empty when valid
	}{
		{"empty", `{}`, ""},
		{"matchLabels", `{"matchLabels":{"example.com/pool":"gpu","tier":""}}`, ""},
		{"matchLabels longest key and value", `{"matchLabels":{"` + strings.Repeat("a", 253) + `/` + long + `":"` + long + `"}}`, ""},
		{"matchLabels key with a space", `{"matchLabels":{"a b":"x"}}`, "spec.selector.matchLabels"},
		{"matchLabels key starting with a dash", `{"matchLabels":{"-a":"x"}}`, "spec.selector.matchLabels"},
		{"matchLabels key with two slashes", `{"matchLabels":{"a/b/c":"x"}}`, "spec.selector.matchLabels"},
		{"matchLabels key name of 64", `{"matchLabels":{"` + long + `a":"x"}}`, "spec.selector.matchLabels"},
		{"matchLabels key prefix of 254", `{"matchLabels":{"` + strings.Repeat("a", 254) + `/x":"x"}}`, "spec.selector.matchLabels"},
		{"matchLabels upper-case prefix", `{"matchLabels":{"Example.com/a":"x"}}`, "spec.selector.matchLabels"},
		{"matchLabels value with a space", `{"matchLabels":{"a":"x y"}}`, "spec.selector.matchLabels.a"},
		{"matchLabels value of 64", `{"matchLabels":{"a":"` + long + `a"}}`, "spec.selector.matchLabels.a"},
		{"matchLabels value ending with a dot", `{"matchLabels":{"a":"x."}}`, "spec.selector.matchLabels.a"},
		{"In with values", `{"matchExpressions":[{"key":"a","operator":"In","values":["x","y"]}]}`, ""},
		{"In without values", `{"matchExpressions":[{"key":"a","operator":"In"}]}`, "spec.selector.matchExpressions[0].values"},
		{"In with no value", `{"matchExpressions":[{"key":"a","operator":"In","values":[]}]}`, "spec.selector.matchExpressions[0].values"},
		{"NotIn without values", `{"matchExpressions":[{"key":"a","operator":"NotIn"}]}`, "spec.selector.matchExpressions[0].values"},
		{"NotIn with values", `{"matchExpressions":[{"key":"a","operator":"NotIn","values":["x"]}]}`, ""},
		{"Exists", `{"matchExpressions":[{"key":"a","operator":"Exists"}]}`, ""},
		{"Exists with no value", `{"matchExpressions":[{"key":"a","operator":"Exists","values":[]}]}`, ""},
		{"Exists with values", `{"matchExpressions":[{"key":"a","operator":"Exists","values":["x"]}]}`, "spec.selector.matchExpressions[0].values"},
		{"DoesNotExist", `{"matchExpressions":[{"key":"a","operator":"DoesNotExist"}]}`, ""},
		{"DoesNotExist with values", `{"matchExpressions":[{"key":"a","operator":"DoesNotExist","values":["x"]}]}`, "spec.selector.matchExpressions[0].values"},
		{"second requirement", `{"matchExpressions":[{"key":"a","operator":"Exists"},{"key":"b","operator":"In"}]}`, "spec.selector.matchExpressions[1].values"},
		{"unknown operator", `{"matchExpressions":[{"key":"a","operator":"Gt","values":["1"]}]}`, "spec.selector.matchExpressions[0].operator"},
		{"bad key", `{"matchExpressions":[{"key":"a b","operator":"Exists"}]}`, "spec.selector.matchExpressions[0].key"},
		{"bad value", `{"matchExpressions":[{"key":"a","operator":"In","values":["x y"]}]}`, "spec.selector.matchExpressions[0].values[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sel metav1.LabelSelector
			if err := json.Unmarshal([]byte(tc.selector), &sel); err != nil {
				t.Fatal(err)
			}
			k8sErrs := metav1validation.ValidateLabelSelector(&sel, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("spec", "selector"))
			_, convErr := metav1.LabelSelectorAsSelector(&sel)
			k8sValid := len(k8sErrs) == 0 && convErr == nil
			if k8sValid != (tc.field == "") {
				t.Fatalf("the case is wrong: Kubernetes says valid=%v (%v; %v)", k8sValid, k8sErrs.ToAggregate(), convErr)
			}
			class := fmt.Sprintf(`{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPoolClass",
				"metadata":{"name":"c"},"spec":{"selector":%s,"resourcePolicy":{"resources":{"cpu":"1","memory":"1Gi"}}}}`, tc.selector)
			err := s.Validate(schema.KindSandboxPoolClass, []byte(class))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Kubernetes accepts it, the schema does not: %v", err)
				}
				return
			}
			ve, ok := errors.AsType[*schema.ValidationError](err)
			if !ok {
				t.Fatalf("Kubernetes rejects it (%v; %v), the schema says %v", k8sErrs.ToAggregate(), convErr, err)
			}
			for _, f := range ve.Fields {
				if f.Path != tc.field {
					t.Errorf("the schema names %q (%s), want %q", f.Path, f.Msg, tc.field)
				}
			}
		})
	}
}
