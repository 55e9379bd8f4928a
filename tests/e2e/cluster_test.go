package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/tests/e2e/stack"
	"github.com/agentcube/sandboxpool/tests/support"
)

// The cluster half runs as the Pods of its Deployments (deploy/controller, deploy/webhook);
// these helpers act on them as an operator does, through the API.

// scaleDeployment sets the Deployment's replicas and waits until it has rolled out — for
// the webhook, until the API server reaches it through its Service again (kube-proxy's
// rules follow the ready Pods by a second or so).
func scaleDeployment(t testing.TB, name string, replicas int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := kube.AppsV1().Deployments(v1alpha1.DefaultSystemNamespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Replicas = &replicas
		_, err = kube.AppsV1().Deployments(v1alpha1.DefaultSystemNamespace).Update(context.Background(), d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, name, 2*time.Minute)
	if name == stack.WebhookDeployment && replicas > 0 {
		eventually(t, "the webhook answering through its Service", time.Minute, func() (bool, string) {
			err := suite.s.WebhookAnswers(context.Background())
			return err == nil, fmt.Sprint(err)
		})
	}
}

// waitRolledOut waits until the Deployment has rolled out and, at 0 replicas, until its
// Pods are gone.
func waitRolledOut(t testing.TB, name string, within time.Duration) {
	t.Helper()
	eventually(t, "deployment "+name+" rolled out", within, func() (bool, string) {
		ok, why := suite.s.RolledOut(context.Background(), name)
		if !ok {
			return false, why
		}
		pods, err := allPods(name)
		if err != nil {
			return false, err.Error()
		}
		d, err := suite.s.Deployment(context.Background(), name)
		if err != nil {
			return false, err.Error()
		}
		return int32(len(pods)) == *d.Spec.Replicas, fmt.Sprintf("%s; %d pods", why, len(pods))
	})
}

// allPods are the Deployment's Pods that are not failed or succeeded, those being deleted
// too.
func allPods(name string) ([]corev1.Pod, error) {
	list, err := kube.CoreV1().Pods(v1alpha1.DefaultSystemNamespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: stack.DeploymentLabel + "=" + name})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			out = append(out, p)
		}
	}
	return out, nil
}

// clusterPodUIDs are the UIDs of the cluster half's running Pods, to tell whether any was
// replaced.
func clusterPodUIDs(t testing.TB) map[types.UID]string {
	t.Helper()
	out := map[types.UID]string{}
	for _, d := range []string{stack.ControllerDeployment, stack.WebhookDeployment} {
		pods, err := suite.s.ClusterPods(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			out[p.UID] = p.Name
		}
	}
	return out
}

// clusterRequests are the requests of the cluster half's running Pods.
func clusterRequests(t testing.TB) corev1.ResourceList {
	t.Helper()
	var all []corev1.Pod
	for _, d := range []string{stack.ControllerDeployment, stack.WebhookDeployment} {
		pods, err := suite.s.ClusterPods(context.Background(), d)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, pods...)
	}
	return support.Requests(all...)
}
