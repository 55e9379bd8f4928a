package crdgen

import (
	"slices"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
)

// TestMarkers: each keyword of a property becomes the kubebuilder marker of the same
// meaning, in a fixed order after +required or +optional.
func TestMarkers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        apiextv1.JSONSchemaProps
		required bool
		want     []string
	}{
		{"required string", apiextv1.JSONSchemaProps{Type: "string", MinLength: ptr.To[int64](1), MaxLength: ptr.To[int64](253)}, true,
			[]string{"+required", "+kubebuilder:validation:MinLength=1", "+kubebuilder:validation:MaxLength=253"}},
		{"defaulted string", apiextv1.JSONSchemaProps{Type: "string", Default: &apiextv1.JSON{Raw: []byte(`"placeholder"`)}}, false,
			[]string{"+optional", `+kubebuilder:default="placeholder"`}},
		{"enum", apiextv1.JSONSchemaProps{Type: "string", Enum: []apiextv1.JSON{{Raw: []byte(`"A"`)}, {Raw: []byte(`"B"`)}}}, false,
			[]string{"+optional", "+kubebuilder:validation:Enum=A;B"}},
		{"bounded integer", apiextv1.JSONSchemaProps{Type: "integer", Minimum: ptr.To(0.0), ExclusiveMinimum: true, Maximum: ptr.To(10.0)}, false,
			[]string{"+optional", "+kubebuilder:validation:Minimum=0", "+kubebuilder:validation:ExclusiveMinimum=true",
				"+kubebuilder:validation:Maximum=10"}},
		{"map list", apiextv1.JSONSchemaProps{Type: "array", MaxItems: ptr.To[int64](7), XListType: ptr.To("map"), XListMapKeys: []string{"type"}}, false,
			[]string{"+optional", "+kubebuilder:validation:MaxItems=7", "+listType=map", "+listMapKey=type"}},
		{"object", apiextv1.JSONSchemaProps{Type: "object", MinProperties: ptr.To[int64](2), MaxProperties: ptr.To[int64](32),
			Default: &apiextv1.JSON{Raw: []byte(`{}`)}}, false,
			[]string{"+optional", "+kubebuilder:default={}", "+kubebuilder:validation:MinProperties=2", "+kubebuilder:validation:MaxProperties=32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Markers(tc.p, tc.required); !slices.Equal(got, tc.want) {
				t.Errorf("Markers = %q, want %q", got, tc.want)
			}
		})
	}
}
