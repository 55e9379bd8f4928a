package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/operator"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
)

// layer is what decided a write: allowed, or the layer that refused it.
type layer string

const (
	allowed     layer = "allowed"
	byRBAC      layer = "refused by RBAC"
	byLeaseVAP  layer = "refused by the node policy (Leases)"
	byEventVAP  layer = "refused by the node policy (events)"
	byWebhook   layer = "refused by the webhook"
	byCRDSchema layer = "refused by the CRD schema"
)

// layerOf tells which layer answered err.
func layerOf(err error) (layer, error) {
	if err == nil {
		return allowed, nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "ValidatingAdmissionPolicy 'sandbox-pool-node-lease'"):
		return byLeaseVAP, nil
	case strings.Contains(msg, "ValidatingAdmissionPolicy 'sandbox-pool-node-events'"):
		return byEventVAP, nil
	case strings.Contains(msg, `admission webhook "validate.sandboxpool.agentcube.volcano.sh" denied`):
		return byWebhook, nil
	case apierrors.IsForbidden(err) && strings.Contains(msg, " cannot "):
		return byRBAC, nil
	case apierrors.IsInvalid(err):
		return byCRDSchema, nil
	}
	return "", fmt.Errorf("no layer recognised in %w", err)
}

// attack is one write by one caller.
type attack struct {
	group string // the table's section
	who   string // a key of ids
	what  string
	want  layer
	// says is what the refusal must say (the field or the rule); empty for allowed writes.
	says string
	do   func(ctx context.Context, id *identity) error
}

var (
	poolsGVR   = schema.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPools}
	classesGVR = schema.GroupVersionResource{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Resource: v1alpha1.ResourceSandboxPoolClasses}
	poolA      = naming.PoolName(nodeA)
	poolB      = naming.PoolName(nodeB)
)

const (
	class      = "gold"
	leaseNS    = v1alpha1.DefaultLeaseNamespace
	nodeLeases = corev1.NamespaceNodeLease
)

// The writes. A caller's lease* helpers write with its own clients.

func createLease(ns, name, holder string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		now := metav1.NewMicroTime(time.Now())
		_, err := id.kube.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), RenewTime: &now, LeaseDurationSeconds: ptr.To(int32(40))},
		}, metav1.CreateOptions{})
		return err
	}
}

// renewLease is a renewal as an agent makes it: GET, set renewTime and holder, PUT.
func renewLease(ns, name, holder string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		l, err := id.kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime, l.Spec.HolderIdentity = &now, ptr.To(holder)
		_, err = id.kube.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
}

func patchLease(ns, name string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		_, err := id.kube.CoordinationV1().Leases(ns).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"spec":{"renewTime":"`+time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")+`"}}`), metav1.PatchOptions{})
		return err
	}
}

func deleteLease(ns, name string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		return id.kube.CoordinationV1().Leases(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
}

func cond(typ, status string) map[string]any { return framework.Condition(typ, status, "Attack") }

func agentStatus(zone string) map[string]any {
	return map[string]any{
		"poolInfo":   map[string]any{"zone": zone, "allocatableMemoryBytes": int64(4 << 30)},
		"conditions": []any{cond(v1alpha1.ConditionPlaceholderPodReady.String(), "True")},
	}
}

func applyStatus(pool, manager string, status map[string]any, force bool) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		_, err := id.dyn.Resource(poolsGVR).ApplyStatus(ctx, pool, framework.PoolStatus(pool, status),
			metav1.ApplyOptions{FieldManager: manager, Force: force})
		return err
	}
}

func mergeStatus(pool, patch string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		_, err := id.dyn.Resource(poolsGVR).Patch(ctx, pool, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	}
}

func merge(gvr schema.GroupVersionResource, name, patch string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		_, err := id.dyn.Resource(gvr).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
}

func remove(gvr schema.GroupVersionResource, name string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		return id.dyn.Resource(gvr).Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
}

func createClass(spec string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal([]byte(`{"apiVersion":"`+v1alpha1.SchemeGroupVersion.String()+`","kind":"SandboxPoolClass",
			"metadata":{"name":"attack-class"},"spec":`+spec+`}`), &u.Object); err != nil {
			return err
		}
		_, err := id.dyn.Resource(classesGVR).Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
}

const validClassSpec = `{"selector":{"matchLabels":{"pool":"silver"}},"resourcePolicy":{"resources":{"cpu":"1","memory":"1Gi"}}}`

// postEvent posts an events.k8s.io/v1 Event about the object, reported by reporter.
func postEvent(apiVersion, kind, name, reporter string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		_, err := id.kube.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{GenerateName: "attack-"},
			EventTime:           metav1.NewMicroTime(time.Now()),
			ReportingController: reporter, ReportingInstance: reporter + "-1",
			Action: "Attack", Reason: "Attack", Type: corev1.EventTypeNormal, Note: "attack",
			Regarding: corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Name: name},
		}, metav1.CreateOptions{})
		return err
	}
}

// postCoreEvent posts a core/v1 Event about a pool, as older clients do.
func postCoreEvent(pool string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		_, err := id.kube.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "attack-"},
			InvolvedObject: corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.KindSandboxPool, Name: pool},
			Reason:         "Attack", Message: "attack", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "placeholder-agent"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
		}, metav1.CreateOptions{})
		return err
	}
}

var poolAPI = v1alpha1.SchemeGroupVersion.String()

// attacks are run in this order; the allowed ones build the state the later ones try to
// forge (a Lease, a status, an override, a finalizer).
func attacks() []attack {
	forgedPhase := agentStatus("zone-a")
	forgedPhase["phase"] = string(v1alpha1.PhaseReady)
	forgedAgentHealthy := agentStatus("zone-a")
	forgedAgentHealthy["conditions"] = []any{cond(v1alpha1.ConditionPlaceholderPodReady.String(), "True"), cond(v1alpha1.ConditionPlaceholderAgentHealthy.String(), "True")}
	// The controller reports node-a's agent gone; node-a tries to say otherwise.
	controllerStatus := map[string]any{"phase": string(v1alpha1.PhaseDegraded), "conditions": []any{
		cond(v1alpha1.ConditionPlaceholderAgentHealthy.String(), "False"), cond(v1alpha1.ConditionNodeNotFound.String(), "False")}}
	// A claim: the controller's phase applied with its current value, which makes the
	// applier a co-owner that the controller's next apply conflicts with.
	claimPhase := agentStatus("zone-a")
	claimPhase["phase"] = string(v1alpha1.PhaseDegraded)
	const override = `{"spec":{"override":{"enabled":true,"reason":"OPS-1","resourcePolicy":{"resources":{"cpu":"3","memory":"6Gi"}}}}}`
	const (
		leases = "Leases"
		status = "Pool status"
		spec   = "Pool spec and metadata"
		dels   = "Deletes"
		cls    = "Classes"
		events = "Events"
	)
	return []attack{
		{leases, leaseA, "creates its pool's Lease, held by node-a", allowed, "", createLease(leaseNS, poolA, nodeA)},
		{leases, leaseA, "renews its pool's Lease", allowed, "", renewLease(leaseNS, poolA, nodeA)},
		{leases, leaseB, "creates its pool's Lease, held by node-b", allowed, "", createLease(leaseNS, poolB, nodeB)},
		{leases, leaseA, "takes over node-b's pool's Lease (GET, PUT in its own name)", byLeaseVAP, "may write only the Lease of its own pool", renewLease(leaseNS, poolB, nodeA)},
		{leases, leaseA, "renews node-b's pool's Lease in node-b's name", byLeaseVAP, "may write only the Lease of its own pool", renewLease(leaseNS, poolB, nodeB)},
		{leases, leaseA, "patches node-b's pool's Lease", byRBAC, "leases", patchLease(leaseNS, poolB)},
		{leases, leaseA, "creates a Lease for another node's pool", byLeaseVAP, "may write only the Lease of its own pool", createLease(leaseNS, naming.PoolName("node-c"), nodeA)},
		{leases, leaseA, "renews its own pool's Lease in node-b's name", byLeaseVAP, "spec.holderIdentity", renewLease(leaseNS, poolA, nodeB)},
		{leases, leaseA, "deletes node-b's pool's Lease", byRBAC, "leases", deleteLease(leaseNS, poolB)},
		{leases, nodeA, "renews its own pool's Lease (no NodeRestriction)", allowed, "", renewLease(leaseNS, poolA, nodeA)},
		{leases, nodeA, "renews node-b's pool's Lease (no NodeRestriction)", byLeaseVAP, "may write only the Lease of its own pool", renewLease(leaseNS, poolB, nodeA)},
		{leases, strayNode, "renews node-a's pool's Lease", byLeaseVAP, "is neither", renewLease(leaseNS, poolA, "mallory")},
		{leases, straySA, "renews node-a's pool's Lease", byLeaseVAP, "is neither", renewLease(leaseNS, poolA, nodeA)},
		{leases, leaseA, "writes node-b's heartbeat in kube-node-lease", byRBAC, "kube-node-lease", patchLease(nodeLeases, nodeB)},
		{leases, leaseA, "renews the controller's leader-election Lease", byRBAC, "sandbox-pool-system", patchLease(v1alpha1.DefaultSystemNamespace, operator.DefaultLeaderElectionID)},
		{leases, ctrl, "patches node-a's heartbeat in kube-node-lease", byRBAC, "kube-node-lease", patchLease(nodeLeases, nodeA)},
		{leases, ctrl, "renews its own leader-election Lease", allowed, "", renewLease(v1alpha1.DefaultSystemNamespace, operator.DefaultLeaderElectionID, "controller-0")},
		{leases, ctrl, "creates a Lease in the Lease namespace", byRBAC, "leases", createLease(leaseNS, naming.PoolName("node-c"), "node-c")},
		{leases, ctrl, "deletes node-b's pool's Lease (a deleted node's)", allowed, "", deleteLease(leaseNS, poolB)},

		{status, nodeA, "applies its agent fields to its own pool", allowed, "", applyStatus(poolA, v1alpha1.FieldManagerAgent, agentStatus("zone-a"), false)},
		{status, nodeB, "applies its agent fields to its own pool", allowed, "", applyStatus(poolB, v1alpha1.FieldManagerAgent, agentStatus("zone-b"), false)},
		{status, ctrl, "applies the phase and its two conditions", allowed, "", applyStatus(poolA, v1alpha1.FieldManagerController, controllerStatus, false)},
		{status, nodeA, "applies agent fields to node-b's pool", byWebhook, "may only be written by node node-b", applyStatus(poolB, v1alpha1.FieldManagerAgent, agentStatus("forged"), false)},
		{status, nodeA, "sets status.phase of its own pool (apply, force)", byWebhook, "status.phase", applyStatus(poolA, v1alpha1.FieldManagerAgent, forgedPhase, true)},
		{status, nodeA, "sets PlaceholderAgentHealthy on its own pool (apply, force)", byWebhook, "status.conditions[type=PlaceholderAgentHealthy]", applyStatus(poolA, v1alpha1.FieldManagerAgent, forgedAgentHealthy, true)},
		{status, nodeA, "drops the controller's conditions (merge patch of the list)", byWebhook, "status.conditions[type=NodeNotFound]",
			mergeStatus(poolA, `{"status":{"conditions":[`+mustJSON(cond(v1alpha1.ConditionPlaceholderPodReady.String(), "True"))+`]}}`)},
		{status, nodeA, "claims the controller's phase with its current value (apply)", byWebhook, "status.phase: owned by the controller; node node-a (caller system:node:node-a) may not claim it",
			applyStatus(poolA, v1alpha1.FieldManagerAgent, claimPhase, false)},
		{status, ctrl, "rewrites the agent's poolInfo (merge patch)", byWebhook, "status.poolInfo", mergeStatus(poolA, `{"status":{"poolInfo":{"zone":"forged"}}}`)},
		{status, ctrl, "claims the agent's poolInfo with its current value (apply)", byWebhook, "status.poolInfo: owned by the placeholder agent of node node-a; the controller",
			applyStatus(poolA, v1alpha1.FieldManagerController, map[string]any{"poolInfo": agentStatus("zone-a")["poolInfo"]}, false)},
		{status, ctrl, "forces the agent's PlaceholderPodReady (apply, force)", byWebhook, "status.conditions[type=PlaceholderPodReady]",
			applyStatus(poolA, v1alpha1.FieldManagerController, map[string]any{"conditions": []any{cond(v1alpha1.ConditionPlaceholderPodReady.String(), "False")}}, true)},
		{status, strayNode, "applies agent fields to node-a's pool", byWebhook, "caller mallory is neither", applyStatus(poolA, v1alpha1.FieldManagerAgent, agentStatus("forged"), false)},
		{status, admin, "applies agent fields to node-a's pool", byWebhook, "caller alice-admin is neither", applyStatus(poolA, v1alpha1.FieldManagerAgent, agentStatus("forged"), false)},
		{status, leaseA, "applies agent fields to its node's pool", byRBAC, "sandboxpools/status", applyStatus(poolA, v1alpha1.FieldManagerAgent, agentStatus("forged"), false)},
		{status, oper, "merge-patches node-a's pool's status", byRBAC, "sandboxpools/status", mergeStatus(poolA, `{"status":{"phase":"Ready"}}`)},
		{status, tenant, "merge-patches node-a's pool's status", byRBAC, "sandboxpools/status", mergeStatus(poolA, `{"status":{"phase":"Ready"}}`)},
		{status, nodeA, "writes an unknown resize state to its own pool", byCRDSchema, "status.resize.status", mergeStatus(poolA, `{"status":{"resize":{"status":"Paused"}}}`)},

		{spec, oper, "enables an override on node-a's pool", allowed, "", merge(poolsGVR, poolA, override)},
		{spec, oper, "changes node-a's pool's class snapshot", byWebhook, "spec.resourcePolicy: the operator role may change spec.override only",
			merge(poolsGVR, poolA, `{"spec":{"resourcePolicy":{"resources":{"cpu":"64","memory":"256Gi"}}}}`)},
		{spec, oper, "removes node-a's pool's finalizer", byWebhook, "metadata.finalizers", merge(poolsGVR, poolA, `{"metadata":{"finalizers":null}}`)},
		{spec, oper, "sets the ever-ready marker", byWebhook, "metadata.annotations[sandbox-pool.io/ever-ready]: the controller's marker",
			merge(poolsGVR, poolA, `{"metadata":{"annotations":{"`+v1alpha1.AnnotationEverReady+`":"true"}}}`)},
		{spec, nodeA, "patches its own pool's spec", byRBAC, "sandboxpools", merge(poolsGVR, poolA, `{"spec":{"resourcePolicy":{"resources":{"cpu":"64"}}}}`)},
		{spec, ctrl, "turns node-a's override off", byWebhook, "spec.override: set by operators", merge(poolsGVR, poolA, `{"spec":{"override":{"enabled":false}}}`)},
		{spec, ctrl, "updates node-a's pool's class snapshot", allowed, "", merge(poolsGVR, poolA, `{"spec":{"resourcePolicy":{"resources":{"cpu":"3"}}}}`)},
		{spec, ctrl, "sets the ever-ready marker", allowed, "", merge(poolsGVR, poolA, `{"metadata":{"annotations":{"`+v1alpha1.AnnotationEverReady+`":"true"}}}`)},
		{spec, admin, "removes the ever-ready marker", byWebhook, "the controller's marker", merge(poolsGVR, poolA, `{"metadata":{"annotations":{"`+v1alpha1.AnnotationEverReady+`":null}}}`)},
		{spec, admin, "relabels node-a's pool to another class", byWebhook, "metadata.labels[sandbox-pool.io/class]", merge(poolsGVR, poolA, `{"metadata":{"labels":{"`+v1alpha1.LabelClass+`":"silver"}}}`)},
		{spec, admin, "moves node-a's pool to node-b", byCRDSchema, "spec.nodeName is immutable", merge(poolsGVR, poolA, `{"spec":{"nodeName":"node-b"}}`)},
		{spec, tenant, "patches node-a's pool's spec", byRBAC, "sandboxpools", merge(poolsGVR, poolA, override)},

		{dels, nodeA, "deletes its own pool", byRBAC, "sandboxpools", remove(poolsGVR, poolA)},
		{dels, oper, "deletes node-a's pool", byRBAC, "sandboxpools", remove(poolsGVR, poolA)},
		{dels, tenant, "deletes node-a's pool", byRBAC, "sandboxpools", remove(poolsGVR, poolA)},
		{dels, ctrl, "deletes the class", byRBAC, "sandboxpoolclasses", remove(classesGVR, class)},
		{dels, leaseA, "deletes its own pool's Lease", byRBAC, "leases", deleteLease(leaseNS, poolA)},

		{cls, nodeA, "changes the class's quota", byRBAC, "sandboxpoolclasses", merge(classesGVR, class, `{"spec":{"resourcePolicy":{"resources":{"cpu":"64"}}}}`)},
		{cls, oper, "changes the class's quota", byRBAC, "sandboxpoolclasses", merge(classesGVR, class, `{"spec":{"resourcePolicy":{"resources":{"cpu":"64"}}}}`)},
		{cls, tenant, "creates a class", byRBAC, "sandboxpoolclasses", createClass(validClassSpec)},
		{cls, ctrl, "adds its finalizer to the class", allowed, "", merge(classesGVR, class, `{"metadata":{"finalizers":["`+v1alpha1.FinalizerClassPools+`"]}}`)},
		{cls, ctrl, "changes the class's quota", byWebhook, "spec: declared by cluster admins", merge(classesGVR, class, `{"spec":{"resourcePolicy":{"resources":{"cpu":"64"}}}}`)},
		{cls, admin, "changes the class's selector", byCRDSchema, "spec.selector is immutable", merge(classesGVR, class, `{"spec":{"selector":{"matchLabels":{"pool":"all"}}}}`)},
		{cls, admin, "creates a class whose selector gives Exists a value", byCRDSchema, "values must be non-empty when operator is In or NotIn",
			createClass(`{"selector":{"matchExpressions":[{"key":"pool","operator":"Exists","values":["gold"]}]},"resourcePolicy":{"resources":{"cpu":"1","memory":"1Gi"}}}`)},
		{cls, admin, "creates a class whose selector has an invalid label key", byWebhook, `spec.selector.matchLabels: Invalid value: "-pool": must be a qualified name`,
			createClass(`{"selector":{"matchLabels":{"-pool":"gold"}},"resourcePolicy":{"resources":{"cpu":"1","memory":"1Gi"}}}`)},

		{events, nodeA, "posts an event about its own pool", allowed, "", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerAgent)},
		{events, nodeA, "posts an event about its own mirror pod", allowed, "", postEvent("v1", "Pod", "sandbox-pool-node-a", "kubelet")},
		{events, nodeA, "posts an event about node-b's pool", byEventVAP, "may post events about its own pool only", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolB, v1alpha1.FieldManagerAgent)},
		{events, nodeA, "posts a core/v1 event about node-b's pool", byEventVAP, "may post events about its own pool only", postCoreEvent(poolB)},
		{events, nodeA, "posts an event about its own pool as the controller", byEventVAP, "may not post events as the controller", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerController)},
		{events, nodeA, "posts an event about the class", byEventVAP, "may post events about its own pool only", postEvent(poolAPI, v1alpha1.KindSandboxPoolClass, class, v1alpha1.FieldManagerAgent)},
		{events, ctrl, "posts an event about node-b's pool", allowed, "", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolB, v1alpha1.FieldManagerController)},
		{events, strayNode, "posts an event about node-a's pool", byRBAC, "events", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerAgent)},
		{events, leaseA, "posts an event about its node's pool", byRBAC, "events", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerAgent)},
		{events, tenant, "posts an event about node-a's pool", byRBAC, "events", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerAgent)},
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// seed creates, as cluster admin, what the attacks aim at: two nodes, a class, its two
// pools (with the controller's finalizer), the nodes' heartbeats in kube-node-lease and the
// controller's leader-election Lease.
func seed(ctx context.Context, t *testing.T) {
	t.Helper()
	a := ids[admin]
	for _, n := range []string{nodeA, nodeB} {
		if _, err := a.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := createLease(nodeLeases, n, n)(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := createLease(v1alpha1.DefaultSystemNamespace, operator.DefaultLeaderElectionID, "controller-0")(ctx, a); err != nil {
		t.Fatal(err)
	}
	objs := []struct {
		gvr schema.GroupVersionResource
		obj string
	}{
		{classesGVR, `{"kind":"SandboxPoolClass","metadata":{"name":"` + class + `"},
			"spec":{"selector":{"matchLabels":{"pool":"gold"}},"resourcePolicy":{"resources":{"cpu":"2","memory":"4Gi"}}}}`},
	}
	for _, n := range []string{nodeA, nodeB} {
		objs = append(objs, struct {
			gvr schema.GroupVersionResource
			obj string
		}{poolsGVR, `{"kind":"SandboxPool","metadata":{"name":"` + naming.PoolName(n) + `",
			"labels":{"` + v1alpha1.LabelClass + `":"` + class + `","` + v1alpha1.LabelNode + `":"` + n + `"},
			"finalizers":["` + v1alpha1.FinalizerPoolPlaceholderPod + `"]},
			"spec":{"classRef":{"name":"` + class + `"},"nodeName":"` + n + `","resourcePolicy":{"resources":{"cpu":"2","memory":"4Gi"}}}}`})
	}
	for _, o := range objs {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal([]byte(o.obj), &u.Object); err != nil {
			t.Fatal(err)
		}
		u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
		if _, err := a.dyn.Resource(o.gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", u.GetName(), err)
		}
	}
}

// TestAttacks runs every attack in order and checks who answered and what it said; the
// results must be the table in docs/webhook.md.
func TestAttacks(t *testing.T) {
	cp := suite.Require(t)
	ctx := context.Background()
	seed(ctx, t)
	var results []attack
	for i, a := range attacks() {
		id := ids[a.who]
		if id == nil {
			t.Fatalf("attack %d: no identity %q", i+1, a.who)
		}
		err := a.do(ctx, id)
		got, lerr := layerOf(err)
		switch {
		case lerr != nil:
			t.Errorf("%d. %s %s: %v", i+1, a.who, a.what, lerr)
		case got != a.want:
			t.Errorf("%d. %s %s: %s, want %s (%v)", i+1, a.who, a.what, got, a.want, err)
		case err != nil && !strings.Contains(err.Error(), a.says):
			t.Errorf("%d. %s %s: %s, but the answer does not say %q: %v", i+1, a.who, a.what, got, a.says, err)
		}
		results = append(results, a)
	}
	if t.Failed() {
		return
	}
	checkTable(t, filepath.Join(cp.Root, "docs", "webhook.md"), renderTable(results))
}

// The measured part of docs/webhook.md lies between these markers.
const (
	tableBegin = "<!-- BEGIN tests/attack: generated by TestAttacks, do not edit -->"
	tableEnd   = "<!-- END tests/attack -->"
	updateEnv  = "SANDBOXPOOL_UPDATE_DOCS"
)

// renderTable is one table per group: who tried which write, and what answered.
func renderTable(as []attack) string {
	var b strings.Builder
	group := ""
	for i, a := range as {
		if a.group != group {
			group = a.group
			fmt.Fprintf(&b, "\n**%s**\n\n| # | caller | write | result | the answer says |\n|---|---|---|---|---|\n", group)
		}
		says := ""
		if a.says != "" {
			says = "`" + a.says + "`"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", i+1, a.who, a.what, a.want, says)
	}
	return b.String()
}

// checkTable fails t when the generated section of path differs from table, or rewrites
// it when updateEnv is set.
func checkTable(t *testing.T, path, table string) {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(doc), tableBegin)
	if !ok {
		t.Fatalf("%s has no %q marker", path, tableBegin)
	}
	current, after, ok := strings.Cut(rest, tableEnd)
	if !ok {
		t.Fatalf("%s has no %q marker", path, tableEnd)
	}
	want := table + "\n"
	if current == want {
		return
	}
	if os.Getenv(updateEnv) != "" {
		if err := os.WriteFile(path, []byte(before+tableBegin+want+tableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the table in %s", path)
		return
	}
	t.Errorf("the table in %s is not what was measured; rerun with %s=1 to rewrite it. Measured:\n%s", path, updateEnv, table)
}
