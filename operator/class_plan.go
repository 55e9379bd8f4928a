package operator

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// classPlan is what one class reconcile must do to make the class's pools match its
// selector and policy. It is computed by planClass, a pure function; all side effects
// happen in ClassReconciler.
type classPlan struct {
	// create lists the nodes (sorted) that match and have no pool yet.
	create []string
	// update holds pools of the class, already changed to the desired state, whose snapshot,
	// labels, owner reference or finalizer are out of date.
	update []*v1alpha1.SandboxPool
	// remove holds pools of the class whose node exists but no longer matches.
	remove []*v1alpha1.SandboxPool
	// conflicts lists selected nodes whose pool belongs to another class (layer 3 of
	// single-class-per-node: checked before any create).
	conflicts []nodeConflict
}

// nodeConflict is a selected node whose pool another class owns.
type nodeConflict struct {
	Node, Pool, Class string
}

// nodeView is what the plan needs to know about a node: its labels.
type nodeView struct {
	Name   string
	Labels map[string]string
}

// planInput is everything planClass decides from.
type planInput struct {
	Class    *v1alpha1.SandboxPoolClass
	Selector labels.Selector
	Snapshot Snapshot
	// Nodes is every node the controller knows, by name.
	Nodes map[string]nodeView
	// Pools are the pools whose spec.classRef names the class.
	Pools []*v1alpha1.SandboxPool
	// PoolOfNode returns the pool with the deterministic name of a node, of any class, or nil.
	PoolOfNode func(node string) *v1alpha1.SandboxPool
}

// planClass decides, per node, "should have a pool" (exists and matches the selector) and
// compares with the pools that exist. A pool whose node is gone is left to the pool
// controller: it reports NodeNotFound and is Unready, and is deleted after --node-gone-grace
// (pool_nodegone.go); a node that returns is a node without a pool, which gets one here.
func planClass(in planInput) classPlan {
	var p classPlan
	ours := make(map[string]bool, len(in.Pools))
	for _, pool := range in.Pools {
		ours[pool.Spec.NodeName] = true
		if pool.DeletionTimestamp != nil {
			continue
		}
		node, exists := in.Nodes[pool.Spec.NodeName]
		if exists && !in.Selector.Matches(labels.Set(node.Labels)) {
			p.remove = append(p.remove, pool)
			continue
		}
		if want, changed := desiredPool(in.Class, pool, in.Snapshot); changed {
			p.update = append(p.update, want)
		}
	}
	for name, node := range in.Nodes {
		if ours[name] || !in.Selector.Matches(labels.Set(node.Labels)) {
			continue
		}
		if other := in.PoolOfNode(name); other != nil && other.Spec.ClassRef.Name != in.Class.Name {
			p.conflicts = append(p.conflicts, nodeConflict{Node: name, Pool: other.Name, Class: other.Spec.ClassRef.Name})
			continue
		}
		p.create = append(p.create, name)
	}
	slices.Sort(p.create)
	slices.SortFunc(p.conflicts, func(a, b nodeConflict) int { return strings.Compare(a.Node, b.Node) })
	return p
}

// newPool is the pool the class creates for a node.
func newPool(class *v1alpha1.SandboxPoolClass, node string, snap Snapshot) *v1alpha1.SandboxPool {
	pool := &v1alpha1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Name: naming.PoolName(node)},
		Spec:       v1alpha1.SandboxPoolSpec{ClassRef: v1alpha1.ClassRef{Name: class.Name}, NodeName: node},
	}
	want, _ := desiredPool(class, pool, snap)
	return want
}

// desiredPool returns a copy of pool with everything the class dictates set: the policy
// snapshot, the class and node labels, the controller owner reference and the finalizer.
// changed reports whether anything differed. Fields the class does not own (override,
// nodeCtl, other labels and annotations) are kept.
func desiredPool(class *v1alpha1.SandboxPoolClass, pool *v1alpha1.SandboxPool, snap Snapshot) (*v1alpha1.SandboxPool, bool) {
	want := pool.DeepCopy()
	changed := false
	if !equality.Semantic.DeepEqual(want.Spec.ResourcePolicy, snap.ResourcePolicy) {
		want.Spec.ResourcePolicy = *snap.ResourcePolicy.DeepCopy()
		changed = true
	}
	if !equality.Semantic.DeepEqual(want.Spec.PlaceholderPod, snap.PlaceholderPod) {
		want.Spec.PlaceholderPod = *snap.PlaceholderPod.DeepCopy()
		changed = true
	}
	for k, v := range map[string]string{v1alpha1.LabelClass: class.Name, v1alpha1.LabelNode: naming.LabelValue(pool.Spec.NodeName)} {
		if want.Labels[k] != v {
			if want.Labels == nil {
				want.Labels = map[string]string{}
			}
			want.Labels[k] = v
			changed = true
		}
	}
	if !metav1.IsControlledBy(want, class) {
		ref := metav1.NewControllerRef(class, v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.KindSandboxPoolClass))
		want.OwnerReferences = append(slices.DeleteFunc(want.OwnerReferences, func(r metav1.OwnerReference) bool {
			return r.Controller != nil && *r.Controller
		}), *ref)
		changed = true
	}
	if controllerutil.AddFinalizer(want, v1alpha1.FinalizerPoolPlaceholderPod) {
		changed = true
	}
	return want, changed
}
