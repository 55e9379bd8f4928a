package hollow

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

// Identity is one hollow node's credentials, as bearer tokens: NodeToken authenticates as the
// node itself (system:node:<name> in system:nodes; the API server's --token-auth-file,
// TokenFile, plays the kubelet's client certificate), LeaseToken as the node's Lease
// identity, the service account sandbox-pool-node-lease/placeholder-agent-<name>, with a
// token the API server issued bound to the node's Node object, as
// hack/agent-lease-credentials.sh makes it.
type Identity struct {
	NodeToken, LeaseToken string
}

// NodeTokens gives each node a random token for its node identity.
func NodeTokens(nodes []string) (map[string]Identity, error) {
	out := make(map[string]Identity, len(nodes))
	for _, n := range nodes {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		out[n] = Identity{NodeToken: hex.EncodeToString(b)}
	}
	return out, nil
}

// WriteTokenFile writes the nodes' tokens as the API server's --token-auth-file: token, user
// system:node:<name>, uid, groups system:nodes and system:authenticated.
func WriteTokenFile(path string, ids map[string]Identity) error {
	var b strings.Builder
	for node, id := range ids {
		fmt.Fprintf(&b, "%s,system:node:%s,node-%s,\"system:nodes,system:authenticated\"\n", id.NodeToken, node, node)
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// MintLeaseTokens creates each node's Lease identity (the service account
// placeholder-agent-<node> in the Lease namespace) and a token for it bound to the node's
// Node object (which must exist), valid for expiration seconds, workers at a time, and sets
// them in ids.
func MintLeaseTokens(ctx context.Context, cs kubernetes.Interface, ids map[string]Identity, expiration int64, workers int) error {
	nodes := make([]string, 0, len(ids))
	for n := range ids {
		nodes = append(nodes, n)
	}
	tokens := make([]string, len(nodes))
	ns := v1alpha1.DefaultLeaseNamespace
	err := Parallel(len(nodes), workers, func(i int) error {
		name := v1alpha1.LeaseServiceAccountPrefix + nodes[i]
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating service account %s/%s: %w", ns, name, err)
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, nodes[i], metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the Node of %s: %w", nodes[i], err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(expiration),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("a token for %s/%s bound to Node %s: %w", ns, name, nodes[i], err)
		}
		tokens[i] = tr.Status.Token
		return nil
	})
	if err != nil {
		return err
	}
	for i, n := range nodes {
		id := ids[n]
		id.LeaseToken = tokens[i]
		ids[n] = id
	}
	return nil
}

// noToken stands for a token not (yet) made in an identities file.
const noToken = "-"

// WriteIdentities writes ids for ReadIdentities: a line "<node> <node token> <Lease token>"
// per node, "-" for a token not made.
func WriteIdentities(path string, ids map[string]Identity) error {
	var b strings.Builder
	orNone := func(s string) string {
		if s == "" {
			return noToken
		}
		return s
	}
	for node, id := range ids {
		fmt.Fprintf(&b, "%s %s %s\n", node, orNone(id.NodeToken), orNone(id.LeaseToken))
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// ReadIdentities reads a file WriteIdentities wrote.
func ReadIdentities(path string) (map[string]Identity, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]Identity{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		if len(fs) != 3 {
			return nil, fmt.Errorf("%s:%d: want <node> <node token> <Lease token>, got %d fields", path, line, len(fs))
		}
		id := Identity{NodeToken: fs[1], LeaseToken: fs[2]}
		if id.NodeToken == noToken {
			id.NodeToken = ""
		}
		if id.LeaseToken == noToken {
			id.LeaseToken = ""
		}
		out[fs[0]] = id
	}
	return out, sc.Err()
}
