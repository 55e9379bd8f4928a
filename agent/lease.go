package agent

import (
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// leaseWriter is the client the pools' Leases are written with: the --lease-kubeconfig
// identity when one is set, the agent's own otherwise.
func (a *Agent) leaseWriter() client.Client {
	if a.leaseClient != nil {
		return a.leaseClient
	}
	return a.client
}

// leaseErrorHint adds the fix to a Lease error an operator would otherwise have to decode:
// the NodeRestriction admission plugin refusing a node identity any Lease but its own.
func leaseErrorHint(err error) string {
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "kube-node-lease") {
		return " (the NodeRestriction admission plugin lets a node identity write only its own Lease in kube-node-lease:" +
			" give the agent --lease-kubeconfig with its per-node service account, docs/operator-guide.md)"
	}
	return ""
}
