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

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/operator"
	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/framework"
)

// layer is what decided a write: allowed, or the layer that refused it.
type layer string

const (
	allowed        layer = "allowed"
	byAuthn        layer = "refused by authentication"
	byRBAC         layer = "refused by RBAC"
	byLeaseVAP     layer = "refused by the node policy (Leases)"
	byEventVAP     layer = "refused by the node policy (events)"
	byReporterVAP  layer = "refused by the node policy (event reporters)"
	byTokenVAP     layer = "refused by the node policy (Lease tokens)"
	byPodVAP       layer = "refused by the pod policy"
	byPodDeleteVAP layer = "refused by the pod policy (deletion)"
	byWebhook      layer = "refused by the webhook"
	byCRDSchema    layer = "refused by the CRD schema"
)

// inAPIServer are the layers of the API server's own admission policies: they must answer
// the same with the webhook down.
var inAPIServer = map[layer]bool{byLeaseVAP: true, byEventVAP: true, byReporterVAP: true, byTokenVAP: true, byPodVAP: true, byPodDeleteVAP: true}

// layerOf tells which layer answered err.
func layerOf(err error) (layer, error) {
	if err == nil {
		return allowed, nil
	}
	msg := err.Error()
	switch {
	case apierrors.IsUnauthorized(err):
		return byAuthn, nil
	case strings.Contains(msg, "ValidatingAdmissionPolicy 'sandbox-pool-node-lease'"):
		return byLeaseVAP, nil
	case strings.Contains(msg, "ValidatingAdmissionPolicy 'sandbox-pool-node-events'"):
		return byEventVAP, nil
	case strings.Contains(msg, "ValidatingAdmissionPolicy 'sandbox-pool-event-reporters'"):
		return byReporterVAP, nil
	case strings.Contains(msg, "ValidatingAdmissionPolicy 'sandbox-pool-node-lease-tokens'"):
		return byTokenVAP, nil
	case strings.Contains(msg, "ValidatingAdmissionPolicy 'sandbox-pool-placeholder-pods'"):
		return byPodVAP, nil
	case strings.Contains(msg, "ValidatingAdmissionPolicy 'sandbox-pool-placeholder-pod-deletion'"):
		return byPodDeleteVAP, nil
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

// postEvent posts an events.k8s.io/v1 Event about the object, reported by reporter (its
// instance reporter-1).
func postEvent(apiVersion, kind, name, reporter string) func(context.Context, *identity) error {
	return postEventFrom(apiVersion, kind, name, reporter, reporter+"-1")
}

// postEventFrom posts an events.k8s.io/v1 Event about the object, reported by reporter's
// instance.
func postEventFrom(apiVersion, kind, name, reporter, instance string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		_, err := id.kube.EventsV1().Events(metav1.NamespaceDefault).Create(ctx, &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{GenerateName: "attack-"},
			EventTime:           metav1.NewMicroTime(time.Now()),
			ReportingController: reporter, ReportingInstance: instance,
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

// postRawCoreEvent posts e (core/v1) in its object's namespace, else the default one.
func postRawCoreEvent(e *corev1.Event) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		e := e.DeepCopy()
		ns := e.InvolvedObject.Namespace
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		e.GenerateName = "attack-"
		e.FirstTimestamp, e.LastTimestamp, e.Count = metav1.Now(), metav1.Now(), 1
		if e.Reason == "" {
			e.Reason, e.Message, e.Type = "Attack", "attack", corev1.EventTypeNormal
		}
		_, err := id.kube.CoreV1().Events(ns).Create(ctx, e, metav1.CreateOptions{})
		return err
	}
}

// kubeletRejection is a core/v1 event about the placeholder pod of node as kubelet posts a
// refusal of a static pod (source kubelet on host, reportingInstance instance).
func kubeletRejection(node, host, instance string) *corev1.Event {
	return &corev1.Event{
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: v1alpha1.DefaultPodNamespace,
			Name: "sandbox-pool-2-" + node, UID: types.UID("static-" + node)},
		Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu", Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "kubelet", Host: host}, ReportingController: "kubelet", ReportingInstance: instance,
	}
}

// placeholderPod is a pod bound to node: with kubelet's mirror annotation when mirror is set,
// with the pool's labels and annotations when marked is, on RuntimeClass rc when set.
func placeholderPod(ns, name, node string, mirror, marked bool, rc string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "pause", Image: "pause"}}},
	}
	if mirror {
		p.Annotations[corev1.MirrorPodAnnotationKey] = "static-" + name
	}
	if marked {
		pool := naming.PoolName(node)
		p.Labels[v1alpha1.LabelPoolName], p.Labels[v1alpha1.LabelNode] = naming.LabelValue(pool), naming.LabelValue(node)
		p.Annotations[v1alpha1.AnnotationPoolName] = pool
	}
	if rc != "" {
		p.Spec.RuntimeClassName = ptr.To(rc)
	}
	return p
}

// createPod creates p; as a dry run when dryRun is set, so an allowed pod leaves nothing.
func createPod(p *corev1.Pod, dryRun bool) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		o := metav1.CreateOptions{}
		if dryRun {
			o.DryRun = []string{metav1.DryRunAll}
		}
		_, err := id.kube.CoreV1().Pods(p.Namespace).Create(ctx, p.DeepCopy(), o)
		return err
	}
}

// relabelPod changes the pod's labels (nil value: removes the label) through its main
// resource, or through pods/status as kubelet writes it when status is set.
func relabelPod(ns, name string, labels map[string]*string, status bool) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		p, err := ids[admin].kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for k, v := range labels {
			if v == nil {
				delete(p.Labels, k)
			} else {
				p.Labels[k] = *v
			}
		}
		if status {
			p.Status.Phase = corev1.PodRunning
			_, err = id.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		} else {
			_, err = id.kube.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		}
		return err
	}
}

// deletePod deletes the pod as a dry run, so it stays for the next writes.
func deletePod(ns, name string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		return id.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
}

// evictPod evicts the pod (the API drains use) as a dry run.
func evictPod(ns, name string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		return id.kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			DeleteOptions: &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}})
	}
}

// requestToken requests a token for the Lease identity of saNode, bound to Node boundNode
// ("" for none), valid for seconds.
func requestToken(saNode, boundNode string, seconds int64) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(seconds)}}
		if boundNode != "" {
			tr.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Node", Name: boundNode}
		}
		_, err := id.kube.CoreV1().ServiceAccounts(leaseNS).CreateToken(ctx, v1alpha1.LeaseServiceAccountPrefix+saNode, tr, metav1.CreateOptions{})
		return err
	}
}

// asUserAgent is do with the caller's clients sending userAgent: a client without a field
// manager writes under its user agent's name.
func asUserAgent(userAgent string, do func(context.Context, *identity) error) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		cfg := rest.CopyConfig(id.cfg)
		cfg.UserAgent = userAgent
		ua, err := newIdentity(id.user, cfg)
		if err != nil {
			return err
		}
		return do(ctx, ua)
	}
}

// editManagedFields reads the object (pool or class, main resource) and writes it back with
// its managedFields changed by edit, as kubectl edit would.
func editManagedFields(gvr schema.GroupVersionResource, name string, edit func([]metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		u, err := id.dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		u.SetManagedFields(edit(u.GetManagedFields()))
		_, err = id.dyn.Resource(gvr).Update(ctx, u, metav1.UpdateOptions{})
		return err
	}
}

// moveField moves the field path (a fieldsV1 key path such as ["f:status", "f:phase"]) from
// the entries of manager from to a new Update entry of manager to.
func moveField(from, to string, path ...string) func([]metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	return func(entries []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
		var out []metav1.ManagedFieldsEntry
		for _, e := range entries {
			if e.Manager == from && e.FieldsV1 != nil {
				var fields map[string]any
				if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &fields); err == nil && unstructuredHas(fields, path) {
					unstructured.RemoveNestedField(fields, path...)
					e.FieldsV1 = metav1.NewFieldsV1(mustJSON(fields))
				}
			}
			out = append(out, e)
		}
		moved := map[string]any{}
		_ = unstructured.SetNestedField(moved, map[string]any{}, path...)
		now := metav1.Now()
		return append(out, metav1.ManagedFieldsEntry{Manager: to, Operation: metav1.ManagedFieldsOperationUpdate,
			APIVersion: v1alpha1.SchemeGroupVersion.String(), Time: &now, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(mustJSON(moved))})
	}
}

func unstructuredHas(fields map[string]any, path []string) bool {
	_, found, err := unstructured.NestedFieldNoCopy(fields, path...)
	return found && err == nil
}

func deleteNode(name string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		return id.kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// untilRefused repeats do for up to 30 s while it succeeds: the API server caches a token's
// successful authentication for 10 s, so a token bound to a deleted object is refused up to
// 10 s after the deletion.
func untilRefused(do func(context.Context, *identity) error) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		var err error
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			err = do(ctx, id)
			return err != nil, nil
		})
		return err
	}
}

// writeClassStatus merge-patches the class's status.
func writeClassStatus(patch string) func(context.Context, *identity) error {
	return func(ctx context.Context, id *identity) error {
		_, err := id.dyn.Resource(classesGVR).Patch(ctx, class, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
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
		tokens = "Lease tokens"
		status = "Pool status"
		owners = "Field ownership"
		spec   = "Pool spec and metadata"
		dels   = "Deletes"
		cls    = "Classes"
		events = "Events"
		pods   = "Placeholder pods"
	)
	ownMirror := placeholderPod(v1alpha1.DefaultPodNamespace, "sandbox-pool-1-"+nodeA, nodeA, true, true, v1alpha1.DefaultRuntimeClassName)
	podNS := v1alpha1.DefaultPodNamespace
	otherPool := ptr.To("placeholder-node-b")
	return []attack{
		{leases, leaseA, "creates its pool's Lease, held by node-a", allowed, "", createLease(leaseNS, poolA, nodeA)},
		{leases, leaseA, "renews its pool's Lease", allowed, "", renewLease(leaseNS, poolA, nodeA)},
		{leases, leaseB, "creates its pool's Lease, held by node-b", allowed, "", createLease(leaseNS, poolB, nodeB)},
		{leases, leaseUnbound, "renews its pool's Lease", byLeaseVAP, "must use a token bound to Node node-a", renewLease(leaseNS, poolA, nodeA)},
		{leases, leaseAasB, "renews its pool's Lease", byLeaseVAP, "this one is bound to node node-b", renewLease(leaseNS, poolA, nodeA)},
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

		{tokens, leaseA, "requests its next token, bound to Node node-a", allowed, "", requestToken(nodeA, nodeA, 3600)},
		{tokens, leaseUnbound, "exchanges its token for one bound to Node node-a", allowed, "", requestToken(nodeA, nodeA, 3600)},
		{tokens, leaseA, "requests a token of node-b's Lease identity", byTokenVAP, "may request its own token only", requestToken(nodeB, nodeB, 3600)},
		{tokens, leaseA, "requests a token bound to Node node-b", byTokenVAP, "spec.boundObjectRef", requestToken(nodeA, nodeB, 3600)},
		{tokens, leaseA, "requests a token bound to nothing", byTokenVAP, "spec.boundObjectRef", requestToken(nodeA, "", 3600)},
		{tokens, leaseA, "requests a token for two days", byTokenVAP, "spec.expirationSeconds", requestToken(nodeA, nodeA, 2*86400)},
		{tokens, straySA, "requests a token of node-a's Lease identity", byTokenVAP, "is none", requestToken(nodeA, nodeA, 3600)},
		{tokens, nodeA, "requests a token of its Lease identity", byRBAC, "serviceaccounts/token", requestToken(nodeA, nodeA, 3600)},
		{tokens, tenant, "requests a token of node-a's Lease identity", byRBAC, "serviceaccounts/token", requestToken(nodeA, nodeA, 3600)},
		{tokens, leaseC, "creates its pool's Lease, held by node-c", allowed, "", createLease(leaseNS, naming.PoolName(nodeC), nodeC)},
		{tokens, admin, "deletes Node node-c, which node-c's Lease identity's token is bound to", allowed, "", deleteNode(nodeC)},
		{tokens, leaseC, "renews its pool's Lease once Node node-c is gone", byAuthn, "Unauthorized", untilRefused(renewLease(leaseNS, naming.PoolName(nodeC), nodeC))},
		{tokens, leaseC, "requests its next token once Node node-c is gone", byAuthn, "Unauthorized", requestToken(nodeC, nodeC, 3600)},

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

		{owners, nodeA, "applies its agent fields to its own pool under the controller's field manager", byWebhook,
			"metadata.managedFields[manager=sandboxpool-controller]: the controller writes under this field manager only", applyStatus(poolA, v1alpha1.FieldManagerController, agentStatus("zone-a"), false)},
		{owners, nodeA, "merge-patches its own pool's status with the controller's name as user agent", byWebhook,
			"metadata.managedFields[manager=sandboxpool-controller]", asUserAgent(v1alpha1.FieldManagerController+"/v0.1.0", mergeStatus(poolA, `{"status":{"poolInfo":{"zone":"zone-ua"}}}`))},
		{owners, ctrl, "applies the phase under the agent's field manager", byWebhook,
			"metadata.managedFields[manager=placeholder-agent]", applyStatus(poolA, v1alpha1.FieldManagerAgent, map[string]any{"phase": string(v1alpha1.PhaseDegraded)}, false)},
		{owners, nodeB, "applies agent fields to node-a's pool under the agent's field manager", byWebhook,
			"metadata.managedFields[manager=placeholder-agent]", applyStatus(poolA, v1alpha1.FieldManagerAgent, agentStatus("forged"), false)},
		{owners, oper, "rewrites managedFields so that another manager owns status.phase", byWebhook,
			"status.phase is owned by the controller (field manager sandboxpool-controller)", editManagedFields(poolsGVR, poolA, moveField(v1alpha1.FieldManagerController, "olivia-tool", "f:status", "f:phase"))},
		{owners, admin, "rewrites managedFields so that it owns the agent's poolInfo", byWebhook,
			"status.poolInfo.zone is owned by the placeholder agent of the pool's node", editManagedFields(poolsGVR, poolA, moveField(v1alpha1.FieldManagerAgent, "alice", "f:status", "f:poolInfo", "f:zone"))},
		{owners, admin, "rewrites the class's status", byWebhook, "status: written by the controller only", writeClassStatus(`{"status":{"totalSandboxPools":9}}`)},
		{owners, ctrl, "writes the class's status", allowed, "", writeClassStatus(`{"status":{"totalSandboxPools":2}}`)},

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
		{cls, admin, "creates a class whose selector has an invalid label key", byCRDSchema, `spec.selector.matchLabels: Invalid value: key "-pool" must be a qualified name`,
			createClass(`{"selector":{"matchLabels":{"-pool":"gold"}},"resourcePolicy":{"resources":{"cpu":"1","memory":"1Gi"}}}`)},

		{events, nodeA, "posts an event about its own pool", allowed, "", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerAgent)},
		{events, nodeA, "posts an event about its own mirror pod", allowed, "", postEventFrom("v1", "Pod", "sandbox-pool-node-a", "kubelet", nodeA)},
		{events, nodeA, "posts an event about node-b's pool", byEventVAP, "may post events about its own pool only", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolB, v1alpha1.FieldManagerAgent)},
		{events, nodeA, "posts a core/v1 event about node-b's pool", byEventVAP, "may post events about its own pool only", postCoreEvent(poolB)},
		{events, nodeA, "posts an event about node-b's pool without involvedObject.apiVersion", byEventVAP, "may post events about its own pool only",
			postRawCoreEvent(&corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: v1alpha1.KindSandboxPool, Name: poolB}, Source: corev1.EventSource{Component: v1alpha1.FieldManagerAgent}})},
		{events, nodeA, "posts an event about its own pool related to node-b's", byEventVAP, "SandboxPool placeholder-node-b",
			postRawCoreEvent(&corev1.Event{InvolvedObject: corev1.ObjectReference{APIVersion: poolAPI, Kind: v1alpha1.KindSandboxPool, Name: poolA},
				Related: &corev1.ObjectReference{Kind: v1alpha1.KindSandboxPool, Name: poolB}, Source: corev1.EventSource{Component: v1alpha1.FieldManagerAgent}})},
		{events, nodeA, "posts an event about its own pool as the controller", byReporterVAP, "only the SandboxPool controller", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerController)},
		{events, nodeA, "posts a core/v1 event about its own pool from source.component sandboxpool-controller", byReporterVAP, "only the SandboxPool controller",
			postRawCoreEvent(&corev1.Event{InvolvedObject: corev1.ObjectReference{APIVersion: poolAPI, Kind: v1alpha1.KindSandboxPool, Name: poolA}, Source: corev1.EventSource{Component: v1alpha1.FieldManagerController}})},
		{events, admin, "posts an event about node-a's pool as the controller's instance", byReporterVAP, "only the SandboxPool controller",
			postRawCoreEvent(&corev1.Event{InvolvedObject: corev1.ObjectReference{APIVersion: poolAPI, Kind: v1alpha1.KindSandboxPool, Name: poolA},
				ReportingController: "ops-tool", ReportingInstance: v1alpha1.FieldManagerController + "-7d9f"})},
		{events, nodeA, "posts kubelet's rejection of its own placeholder pod", allowed, "", postRawCoreEvent(kubeletRejection(nodeA, nodeA, nodeA))},
		{events, nodeA, "posts a kubelet rejection of node-b's placeholder pod", byReporterVAP, "only a node's own kubelet", postRawCoreEvent(kubeletRejection(nodeB, nodeB, nodeB))},
		{events, nodeA, "posts a kubelet rejection from its own host naming node-b as instance", byReporterVAP, "only a node's own kubelet", postRawCoreEvent(kubeletRejection(nodeB, nodeA, nodeB))},
		{events, admin, "posts a kubelet rejection of node-a's placeholder pod", byReporterVAP, "only a node's own kubelet", postRawCoreEvent(kubeletRejection(nodeA, nodeA, nodeA))},
		{events, nodeA, "posts an event about the class", byEventVAP, "may post events about its own pool only", postEvent(poolAPI, v1alpha1.KindSandboxPoolClass, class, v1alpha1.FieldManagerAgent)},
		{events, ctrl, "posts an event about node-b's pool", allowed, "", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolB, v1alpha1.FieldManagerController)},
		{events, strayNode, "posts an event about node-a's pool", byRBAC, "events", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerAgent)},
		{events, leaseA, "posts an event about its node's pool", byRBAC, "events", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerAgent)},
		{events, tenant, "posts an event about node-a's pool", byRBAC, "events", postEvent(poolAPI, v1alpha1.KindSandboxPool, poolA, v1alpha1.FieldManagerAgent)},

		{pods, nodeA, "creates the mirror pod of a piece of its lock", allowed, "", createPod(ownMirror, false)},
		{pods, nodeA, "creates a mirror pod with the pool's labels bound to node-b", byPodVAP, "created by system:node:node-a is not one",
			createPod(placeholderPod(podNS, "sandbox-pool-1-"+nodeB, nodeB, true, true, ""), true)},
		{pods, nodeA, "creates a pod with the pool's labels without the mirror annotation", byPodVAP, "metadata.labels[sandbox-pool.io/",
			createPod(placeholderPod(podNS, "sandbox-pool-9-"+nodeA, nodeA, false, true, ""), true)},
		{pods, nodeA, "creates its mirror pod with the pool's labels in another namespace", byPodVAP, "namespace sandbox-pool-system",
			createPod(placeholderPod(tenantNS, "sandbox-pool-1-"+nodeA, nodeA, true, true, ""), true)},
		{pods, tenant, "creates a pod with the pool's labels bound to node-a", byPodVAP, "created by tenant-1 is not one",
			createPod(placeholderPod(tenantNS, "sandbox-pool-1-"+nodeA, nodeA, false, true, ""), true)},
		{pods, tenant, "creates a pod with the pool's labels and the mirror annotation", byPodVAP, "created by tenant-1 is not one",
			createPod(placeholderPod(tenantNS, "sandbox-pool-2-"+nodeA, nodeA, true, true, ""), true)},
		{pods, tenant, "creates a pod on the placeholder RuntimeClass", byPodVAP, "spec.runtimeClassName",
			createPod(placeholderPod(tenantNS, "free-ride", nodeA, false, false, v1alpha1.DefaultRuntimeClassName), true)},
		{pods, tenant, "creates an ordinary pod", allowed, "", createPod(placeholderPod(tenantNS, "ordinary", nodeA, false, false, ""), true)},
		{pods, tenant, "creates a pod with the pool's labels in the pod namespace", byRBAC, "pods",
			createPod(placeholderPod(podNS, "sandbox-pool-3-"+nodeA, nodeA, false, true, ""), true)},
		{pods, admin, "creates a pod with the pool's labels in the pod namespace", byPodVAP, "created by alice-admin is not one",
			createPod(placeholderPod(podNS, "sandbox-pool-3-"+nodeA, nodeA, true, true, ""), true)},
		{pods, nodeA, "writes its mirror pod's status", allowed, "", relabelPod(podNS, ownMirror.Name, nil, true)},
		{pods, nodeB, "relabels node-a's mirror pod through pods/status", byPodVAP, "may not add, change or remove them",
			relabelPod(podNS, ownMirror.Name, map[string]*string{v1alpha1.LabelPoolName: otherPool}, true)},
		{pods, admin, "removes the pool label of node-a's mirror pod", byPodVAP, "may not add, change or remove them",
			relabelPod(podNS, ownMirror.Name, map[string]*string{v1alpha1.LabelPoolName: nil}, false)},
		{pods, admin, "adds an unrelated label to node-a's mirror pod", allowed, "", relabelPod(podNS, ownMirror.Name, map[string]*string{"team": ptr.To("ops")}, false)},
		{pods, admin, "deletes node-a's mirror pod", byPodDeleteVAP, "is deleted by system:node:node-a and the garbage collectors only", deletePod(podNS, ownMirror.Name)},
		{pods, nodeB, "deletes node-a's mirror pod", byPodDeleteVAP, "not by system:node:node-b", deletePod(podNS, ownMirror.Name)},
		{pods, admin, "evicts node-a's mirror pod", byPodDeleteVAP, "is not evicted", evictPod(podNS, ownMirror.Name)},
		{pods, tenant, "deletes node-a's mirror pod", byRBAC, "pods", deletePod(podNS, ownMirror.Name)},
		{pods, podGC, "deletes node-a's mirror pod (its Node gone)", allowed, "", deletePod(podNS, ownMirror.Name)},
		{pods, nodeA, "deletes its mirror pod", allowed, "", deletePod(podNS, ownMirror.Name)},
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// seed creates, as cluster admin, what the attacks aim at (the nodes are made with the
// identities): a class, its two pools (with the controller's finalizer), the nodes'
// heartbeats in kube-node-lease and the controller's leader-election Lease.
func seed(ctx context.Context, t *testing.T) {
	t.Helper()
	a := ids[admin]
	for _, n := range []string{nodeA, nodeB} {
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
	// The webhook down: its configuration removed, as while it is removed or switched to
	// failurePolicy Ignore, the strongest form of "down". Every refusal of the API server's
	// own policies must come again, from the same policy and saying the same.
	// node-b's pool's Lease, which the controller deleted among the attacks, is what some
	// forged renewals aim at.
	if err := createLease(leaseNS, poolB, nodeB)(ctx, ids[leaseB]); err != nil {
		t.Fatal(err)
	}
	withoutWebhook(t, func() {
		for i, a := range results {
			if !inAPIServer[a.want] {
				continue
			}
			err := a.do(ctx, ids[a.who])
			got, lerr := layerOf(err)
			switch {
			case lerr != nil:
				t.Errorf("webhook down: %d. %s %s: %v", i+1, a.who, a.what, lerr)
			case got != a.want:
				t.Errorf("webhook down: %d. %s %s: %s, want %s (%v)", i+1, a.who, a.what, got, a.want, err)
			case !strings.Contains(err.Error(), a.says):
				t.Errorf("webhook down: %d. %s %s: %s, but the answer does not say %q: %v", i+1, a.who, a.what, got, a.says, err)
			}
		}
	})
	if t.Failed() {
		return
	}
	checkTable(t, filepath.Join(cp.Root, "docs", "webhook.md"), renderTable(results))
}

// withoutWebhook runs f with the webhook's configuration removed, once the API server no
// longer calls the webhook (a dry run it refuses is admitted), and puts it back after.
func withoutWebhook(t *testing.T, f func()) {
	t.Helper()
	ctx := context.Background()
	whs := ids[admin].kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	list, err := whs.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("want the one webhook configuration, got %d (%v)", len(list.Items), err)
	}
	saved := list.Items[0].DeepCopy()
	saved.ResourceVersion, saved.UID = "", ""
	// The stray node's status write: the webhook refuses it, nothing else does.
	probe := func(ctx context.Context) error {
		_, err := ids[strayNode].dyn.Resource(poolsGVR).Patch(ctx, poolA, types.MergePatchType, []byte(`{"status":{"poolInfo":{"zone":"probe"}}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err
	}
	in := func(want bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			return (probe(ctx) != nil) == want, nil
		}); err != nil {
			t.Fatalf("the webhook configured=%v not in effect within 30 s", want)
		}
	}
	if err := whs.Delete(ctx, saved.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := whs.Create(ctx, saved, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		in(true)
	}()
	in(false)
	f()
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
			fmt.Fprintf(&b, "\n**%s**\n\n| # | caller | write | result | webhook down | the answer says |\n|---|---|---|---|---|---|\n", group)
		}
		says := ""
		if a.says != "" {
			says = "`" + a.says + "`"
		}
		down := ""
		if inAPIServer[a.want] {
			down = "the same"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", i+1, a.who, a.what, a.want, down, says)
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
