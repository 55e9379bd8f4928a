// Package wrappers builds SandboxPoolClass and SandboxPool objects for tests, in the style
// of Kubernetes' and kubernetes-sigs/lws's test wrappers: Make… gives a minimal valid
// object, each method sets one thing and returns the wrapper, Obj returns the object.
//
//	class := wrappers.MakeClass("gpu").Selector("pool", "gpu").Resources("2", "4Gi").Obj()
//	pool := wrappers.MakePool("node-a").Class("gpu").Resources("2", "4Gi").Obj()
//
// It imports only the API packages (schema/v1alpha1, schema/naming), so unit tests of the
// operator, policy and webhook packages can use it without an import cycle.
package wrappers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Resources is the resource list of cpu and memory quantities ("500m", "4Gi").
func Resources(cpu, memory string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
}

// ClassWrapper builds a SandboxPoolClass.
type ClassWrapper struct{ v1alpha1.SandboxPoolClass }

// MakeClass is a class named name, with its type set and nothing else.
func MakeClass(name string) *ClassWrapper {
	return &ClassWrapper{v1alpha1.SandboxPoolClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.KindSandboxPoolClass},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}}
}

// Obj returns the class.
func (w *ClassWrapper) Obj() *v1alpha1.SandboxPoolClass { return &w.SandboxPoolClass }

// UID sets the class's UID (objects that never reach an API server need their own).
func (w *ClassWrapper) UID(uid string) *ClassWrapper {
	w.ObjectMeta.UID = types.UID(uid)
	return w
}

// Selector makes the class select the nodes labelled key=value.
func (w *ClassWrapper) Selector(key, value string) *ClassWrapper {
	w.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}
	return w
}

// Resources sets the quota of each node's pool to cpu and memory.
func (w *ClassWrapper) Resources(cpu, memory string) *ClassWrapper {
	return w.ResourceList(Resources(cpu, memory))
}

// ResourceList sets the quota of each node's pool.
func (w *ClassWrapper) ResourceList(res corev1.ResourceList) *ClassWrapper {
	w.Spec.ResourcePolicy = v1alpha1.ResourcePolicy{Resources: res}
	return w
}

// RuntimeClass sets the placeholder pod's runtime class.
func (w *ClassWrapper) RuntimeClass(name string) *ClassWrapper {
	w.Spec.PlaceholderPod.RuntimeClassName = name
	return w
}

// PriorityClass sets the placeholder pod's priority class.
func (w *ClassWrapper) PriorityClass(name string) *ClassWrapper {
	w.Spec.PlaceholderPod.PriorityClassName = name
	return w
}

// PoolWrapper builds a SandboxPool.
type PoolWrapper struct{ v1alpha1.SandboxPool }

// MakePool is node's pool: the name naming.PoolName gives it and spec.nodeName, with its
// type set.
func MakePool(node string) *PoolWrapper {
	return &PoolWrapper{v1alpha1.SandboxPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.KindSandboxPool},
		ObjectMeta: metav1.ObjectMeta{Name: naming.PoolName(node)},
		Spec:       v1alpha1.SandboxPoolSpec{NodeName: node},
	}}
}

// Obj returns the pool.
func (w *PoolWrapper) Obj() *v1alpha1.SandboxPool { return &w.SandboxPool }

// Name replaces the pool's name.
func (w *PoolWrapper) Name(name string) *PoolWrapper {
	w.ObjectMeta.Name = name
	return w
}

// ResourceVersion sets the pool's resource version, as an informer's cache holds it.
func (w *PoolWrapper) ResourceVersion(rv string) *PoolWrapper {
	w.ObjectMeta.ResourceVersion = rv
	return w
}

// Label sets the label key=value.
func (w *PoolWrapper) Label(key, value string) *PoolWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[key] = value
	return w
}

// Class sets spec.classRef to class.
func (w *PoolWrapper) Class(class string) *PoolWrapper {
	w.Spec.ClassRef = v1alpha1.ClassRef{Name: class}
	return w
}

// Resources sets the pool's quota to cpu and memory.
func (w *PoolWrapper) Resources(cpu, memory string) *PoolWrapper {
	return w.ResourceList(Resources(cpu, memory))
}

// ResourceList sets the pool's quota.
func (w *PoolWrapper) ResourceList(res corev1.ResourceList) *PoolWrapper {
	w.Spec.ResourcePolicy = v1alpha1.ResourcePolicy{Resources: res}
	return w
}

// RuntimeClass sets the placeholder pod's runtime class.
func (w *PoolWrapper) RuntimeClass(name string) *PoolWrapper {
	w.Spec.PlaceholderPod.RuntimeClassName = name
	return w
}

// PriorityClass sets the placeholder pod's priority class.
func (w *PoolWrapper) PriorityClass(name string) *PoolWrapper {
	w.Spec.PlaceholderPod.PriorityClassName = name
	return w
}

// Override sets an operator's override of the class's quota to cpu and memory, with reason.
func (w *PoolWrapper) Override(reason, cpu, memory string) *PoolWrapper {
	w.Spec.Override = &v1alpha1.Override{Enabled: ptr.To(true), Reason: reason,
		ResourcePolicy: v1alpha1.ResourcePolicy{Resources: Resources(cpu, memory)}}
	return w
}
