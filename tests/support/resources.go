package support

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Requests is the sum of the pods' requests as the scheduler counts them
// (k8s.io/component-helpers/resource.PodRequests: containers, init containers, pod-level
// resources and overhead).
func Requests(pods ...corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := range pods {
		AddResources(out, resourcehelper.PodRequests(&pods[i], resourcehelper.PodResourcesOptions{}))
	}
	return out
}

// AddResources adds l to sum, quantity by quantity.
func AddResources(sum, l corev1.ResourceList) {
	for name, q := range l {
		s := sum[name]
		s.Add(q)
		sum[name] = s
	}
}
