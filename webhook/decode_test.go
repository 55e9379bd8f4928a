package webhook

import (
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"
)

// TestDecodeObjectsApartLikeKJSON checks that decoding a review with its objects copied
// apart gives what kjson gives for the whole body, and that a body it cannot cut is left
// to kjson.
func TestDecodeObjectsApartLikeKJSON(t *testing.T) {
	const req = `"uid":"u","kind":{"group":"g","version":"v","kind":"K"},"resource":{"group":"g","version":"v","resource":"r"},` +
		`"operation":"UPDATE","userInfo":{"username":"n","groups":["a"]},"options":{"fieldManager":"m"},"dryRun":false`
	const obj = `{"apiVersion":"v","kind":"K","metadata":{"name":"p","generation":12345678901234},"spec":{"a":[1,2.5,"x\u00e9"]}}`
	for name, body := range map[string]string{
		"both objects":         `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` + req + `,"object":` + obj + `,"oldObject":` + obj + `}}`,
		"object only":          `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` + req + `,"object":` + obj + `}}`,
		"null old object":      `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"oldObject":null,` + req + `,"object":` + obj + `}}`,
		"white space":          " {\n \"apiVersion\" : \"admission.k8s.io/v1\" , \"kind\":\"AdmissionReview\",\"request\" : {" + req + ", \"object\" :\n " + obj + " } } ",
		"objects that are not": `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` + req + `,"object":[1],"oldObject":"s"}}`,
		"other casing":         `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` + req + `,"Object":` + obj + `,"object":` + obj + `}}`,
		"no objects":           `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` + req + `}}`,
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := decodeObjectsApart([]byte(body))
			if !ok {
				t.Fatal("not decoded apart")
			}
			var want admissionv1.AdmissionReview
			if err := kjson.UnmarshalCaseSensitivePreserveInts([]byte(body), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("apart:\n%+v\nkjson:\n%+v", got.Request, want.Request)
			}
		})
	}
	for name, body := range map[string]string{
		"invalid JSON":          `{"request":{"object":{}}`,
		"duplicate object":      `{"request":{"uid":"u","object":{},"object":{"a":1}}}`,
		"duplicate request":     `{"request":{"uid":"u"},"request":{"uid":"v"}}`,
		"request not object":    `{"request":"x"}`,
		"no request":            `{"apiVersion":"admission.k8s.io/v1"}`,
		"request null":          `{"request":null}`,
		"a field of wrong type": `{"request":{"uid":5,"object":{}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if r, ok := decodeObjectsApart([]byte(body)); ok {
				t.Errorf("decoded apart: %+v; want it left to kjson", r)
			}
		})
	}
}
