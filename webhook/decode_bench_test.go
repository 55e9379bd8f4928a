package webhook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "sigs.k8s.io/json"
)

// BenchmarkDecodeReview measures decoding the review of the agent's status write (both
// objects with a full status and managedFields) two ways: decodeReview, which copies the
// objects apart (jsonraw) and decodes the rest, and kjson on the whole body, as the
// handler would without jsonraw (docs/benchmarks.md).
func BenchmarkDecodeReview(b *testing.B) {
	obj, err := os.ReadFile(filepath.Join("..", "policy", "policytest", "testdata", "pool-status.json"))
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: reviewAPIVersion, Kind: reviewKind},
		Request: &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Update, SubResource: "status",
			Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: obj}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("objects-apart", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeReview(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kjson-whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r admissionv1.AdmissionReview
			if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &r); err != nil || r.Request == nil {
				b.Fatal(err)
			}
		}
	})
}
