package framework

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/tests/support"
	"github.com/agentcube/sandboxpool/webhook"
)

// ServiceAccountConfig creates the service account namespace/name (if it does not exist)
// and returns a client configuration that authenticates with a token the API server issued
// for it (TokenRequest, valid for an hour): the real service-account identity, groups
// system:serviceaccounts and system:serviceaccounts:<namespace> included.
func (c *ControlPlane) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	return c.ServiceAccountConfigBoundTo(ctx, namespace, name, nil)
}

// ServiceAccountConfigBoundTo is ServiceAccountConfig with a token bound to ref (a Node, a
// Pod, a Secret: TokenRequest's boundObjectRef; nil for none), valid for an hour: the API server stops
// accepting it once that object is deleted, and carries its name in the identity (for a
// Node, user info extra authentication.kubernetes.io/node-name).
func (c *ControlPlane) ServiceAccountConfigBoundTo(ctx context.Context, namespace, name string, ref *authenticationv1.BoundObjectReference) (*rest.Config, error) {
	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := kube.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600)), BoundObjectRef: ref},
	}, metav1.CreateOptions{})
	if err != nil && ref != nil {
		return nil, fmt.Errorf("requesting a token for %s/%s bound to %s %s: %w", namespace, name, ref.Kind, ref.Name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// StartWebhook runs the admission webhook (webhook.Run, in this process) with opts'
// identities where the API server expects the configuration registered with WithWebhooks,
// until ctx ends, and returns once it is ready (certificate loaded, pool inventory synced).
func (c *ControlPlane) StartWebhook(ctx context.Context, opts webhook.Options, log logr.Logger) error {
	wo := c.WebhookOptions()
	opts.Addr = net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort))
	opts.CertDir = wo.LocalServingCertDir
	for _, addr := range []*string{&opts.MetricsAddr, &opts.HealthAddr} {
		var err error
		if *addr, err = support.PickFreeAddr(); err != nil {
			return err
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- webhook.Run(ctx, c.Config, opts, log) }()
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-errc:
			return false, fmt.Errorf("webhook exited: %w", err)
		default:
		}
		resp, err := http.Get("http://" + opts.HealthAddr + webhook.ReadyzPath)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
