package crdgen

import (
	"encoding/json"
	"strconv"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Markers are the markers, in kubebuilder's words, that state what the CRD property p of a
// field holds: +required or +optional, its default, enum, bounds, and its list type and
// keys. GoDocs writes them under each field's doc, so a reader (and kube-api-linter) of the
// Go types sees what the API server enforces. Patterns and CEL rules stay in the CRD only:
// their text is the CUE's, and restating it in Go would be a second copy to read, not a
// check.
func Markers(p apiextv1.JSONSchemaProps, required bool) []string {
	m := []string{"+optional"}
	if required {
		m = []string{"+required"}
	}
	if p.Default != nil {
		m = append(m, "+kubebuilder:default="+string(p.Default.Raw))
	}
	if len(p.Enum) > 0 {
		values := make([]string, len(p.Enum))
		for i, e := range p.Enum {
			var s string
			if err := json.Unmarshal(e.Raw, &s); err != nil {
				s = string(e.Raw) // not a string: written as it is
			}
			values[i] = s
		}
		m = append(m, "+kubebuilder:validation:Enum="+strings.Join(values, ";"))
	}
	bound := func(name string, n *int64) {
		if n != nil {
			m = append(m, "+kubebuilder:validation:"+name+"="+strconv.FormatInt(*n, 10))
		}
	}
	bound("MinLength", p.MinLength)
	bound("MaxLength", p.MaxLength)
	bound("MinItems", p.MinItems)
	bound("MaxItems", p.MaxItems)
	bound("MinProperties", p.MinProperties)
	bound("MaxProperties", p.MaxProperties)
	number := func(name string, f *float64, exclusive bool) {
		if f == nil {
			return
		}
		m = append(m, "+kubebuilder:validation:"+name+"="+strconv.FormatFloat(*f, 'f', -1, 64))
		if exclusive {
			m = append(m, "+kubebuilder:validation:Exclusive"+name+"=true")
		}
	}
	number("Minimum", p.Minimum, p.ExclusiveMinimum)
	number("Maximum", p.Maximum, p.ExclusiveMaximum)
	if p.XListType != nil {
		m = append(m, "+listType="+*p.XListType)
	}
	for _, k := range p.XListMapKeys {
		m = append(m, "+listMapKey="+k)
	}
	return m
}
