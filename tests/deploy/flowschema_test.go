package deploy

import (
	"context"
	"net/http"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestControllerFlowSchema: with deploy/controller/flowschema.yaml applied, the API server's
// API Priority and Fairness classifies the controller's requests with that FlowSchema into
// workload-high (the X-Kubernetes-PF-* response headers name the UIDs it chose), while
// another service account of the namespace stays where the built-in schemas put it.
func TestControllerFlowSchema(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	if err := cp.ApplyDeploy(ctx, "namespace.yaml", "controller/flowschema.yaml"); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cp.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var fs flowcontrolv1.FlowSchema
	if err := admin.Get(ctx, types.NamespacedName{Name: "sandbox-pool-controller"}, &fs); err != nil {
		t.Fatal(err)
	}
	var high flowcontrolv1.PriorityLevelConfiguration
	if err := admin.Get(ctx, types.NamespacedName{Name: fs.Spec.PriorityLevelConfiguration.Name}, &high); err != nil {
		t.Fatalf("the FlowSchema's priority level %q: %v", fs.Spec.PriorityLevelConfiguration.Name, err)
	}
	classify := func(user string) (flowSchema, priorityLevel string) {
		t.Helper()
		cfg, err := cp.AddUser(user, "system:serviceaccounts", "system:serviceaccounts:sandbox-pool-system", "system:authenticated")
		if err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Any request is classified before it is authorised; a 403 carries the headers too.
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/api/v1/namespaces/sandbox-pool-system/pods", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
	}
	gotFS, gotPL := classify("system:serviceaccount:sandbox-pool-system:sandbox-pool-controller")
	if gotFS != string(fs.UID) || gotPL != string(high.UID) {
		t.Errorf("the controller's request: FlowSchema %q, priority level %q; want sandbox-pool-controller (%s) and %s (%s)",
			gotFS, gotPL, fs.UID, high.Name, high.UID)
	}
	if otherFS, _ := classify("system:serviceaccount:sandbox-pool-system:sandbox-pool-webhook"); otherFS == "" || otherFS == string(fs.UID) {
		t.Errorf("the webhook's request: FlowSchema %q, want a built-in one, not sandbox-pool-controller", otherFS)
	}
}
