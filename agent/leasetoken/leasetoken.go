// Package leasetoken keeps the token of a node's Lease identity (the agent's
// --lease-kubeconfig, docs/operator-guide.md "Lease identity"): a service-account token bound
// to the node's Node object, short-lived, and refreshed on the node before it expires, so
// that deleting the Node ends the identity.
//
// The Keeper reads the first token from the kubeconfig's tokenFile
// (hack/agent-lease-credentials.sh writes it: bound to the Node when it exists, else bound to
// nothing). It exchanges a token bound to nothing at once, and a bound one once 80 % of its
// life has passed (as kubelet refreshes projected tokens), for a new token of its own
// service account bound to its Node (TokenRequest, serviceaccounts/token, with the token it
// holds: deploy/rbac lets the Lease identity request its own token only, bound to its own
// Node). It writes each new token back to tokenFile, so that a restarted agent starts from
// it, and hands it to the clients of the Lease identity at once.
package leasetoken

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// DefaultLifetime is how long each token the Keeper requests is valid (the agent's
// --lease-token-expiration): kubelet's projected tokens live as long.
const DefaultLifetime = time.Hour

// MaxLifetime is the longest the node policy lets a Lease identity ask for
// (deploy/rbac/node-policy.yaml, section 4).
const MaxLifetime = 24 * time.Hour

// refreshAt is the share of a token's life after which the Keeper replaces it.
const refreshAt = 0.8

// retryInterval is how long the Keeper waits after a failed refresh, or between checks of
// tokenFile for a token an operator put there; exchangeRetry after a failed exchange of a
// token bound to no Node (the Node has not registered yet: renewals wait for it).
const (
	retryInterval = 10 * time.Second
	exchangeRetry = 2 * time.Second
)

// Keeper holds the Lease identity's current token and replaces it before it expires. It is
// an oauth2.TokenSource for the identity's clients.
type Keeper struct {
	path     string // tokenFile
	node     string
	lifetime time.Duration
	clock    clock.WithTicker
	// requests is a client of the identity itself (its transport asks the Keeper).
	requests kubernetes.Interface

	mu      sync.Mutex // guards current
	current token
}

var _ oauth2.TokenSource = (*Keeper)(nil)

// token is a token with what the Keeper reads of its claims.
type token struct {
	raw                string
	namespace, account string
	node               string // the Node it is bound to, "" for none
	issued, expires    time.Time
	valid              bool // expires after it was issued
}

// New starts keeping the token of cfg, the Lease identity's configuration, for node: it
// reads the token from cfg's tokenFile and returns a copy of cfg that authenticates with
// the Keeper's current token. A cfg without tokenFile (a client certificate, an inline
// token) has nothing to keep: New returns it as it is and a nil Keeper.
func New(cfg *rest.Config, node string, lifetime time.Duration, clk clock.WithTicker) (*rest.Config, *Keeper, error) {
	if cfg.BearerTokenFile == "" {
		return cfg, nil, nil
	}
	if lifetime < 10*time.Minute || lifetime > MaxLifetime {
		return nil, nil, fmt.Errorf("--lease-token-expiration %s: must be from 10m (the API server's shortest) to %s", lifetime, MaxLifetime)
	}
	k := &Keeper{path: cfg.BearerTokenFile, node: node, lifetime: lifetime, clock: clk}
	t, err := k.readFile()
	if err != nil {
		return nil, nil, err
	}
	k.current = t
	out := rest.CopyConfig(cfg)
	out.BearerToken, out.BearerTokenFile = "", ""
	out.Wrap(transport.TokenSourceWrapTransport(k))
	if k.requests, err = kubernetes.NewForConfig(out); err != nil {
		return nil, nil, fmt.Errorf("the Lease identity's client: %w", err)
	}
	return out, k, nil
}

// Token is the current token.
func (k *Keeper) Token() (*oauth2.Token, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &oauth2.Token{AccessToken: k.current.raw, TokenType: "Bearer"}, nil
}

// Run keeps the token until ctx ends: it replaces it when Due, retries a failed exchange
// after retryInterval, and adopts a newer token an operator writes to tokenFile.
func (k *Keeper) Run(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("lease-token").WithValues("file", k.path)
	for {
		k.adoptFile(ctx)
		wait := retryInterval
		if due, in := k.Due(k.clock.Now()); due {
			if err := k.Refresh(ctx); err != nil {
				log.Error(err, "refreshing the Lease identity's token (hack/agent-lease-credentials.sh makes a new one if it has expired or its Node was deleted)")
				if !k.bound() {
					wait = exchangeRetry
				}
			}
		} else if in < wait {
			wait = in
		}
		t := k.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
	}
}

// Due reports whether the current token must be replaced at now, else how long until it
// must: at once when it is bound to no Node or to another than the Keeper's, else once
// refreshAt of its life has passed.
func (k *Keeper) Due(now time.Time) (bool, time.Duration) {
	k.mu.Lock()
	t := k.current
	k.mu.Unlock()
	if t.node != k.node || !t.valid {
		return true, 0
	}
	at := t.issued.Add(time.Duration(refreshAt * float64(t.expires.Sub(t.issued))))
	if left := at.Sub(now); left > 0 {
		return false, left
	}
	return true, 0
}

// bound reports whether the current token is bound to the Keeper's Node.
func (k *Keeper) bound() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.current.node == k.node
}

// Refresh requests a new token for the Keeper's service account, bound to its Node and
// valid for its lifetime, with the current token; it holds the new one at once and writes it
// to tokenFile.
func (k *Keeper) Refresh(ctx context.Context) error {
	k.mu.Lock()
	cur := k.current
	k.mu.Unlock()
	tr, err := k.requests.CoreV1().ServiceAccounts(cur.namespace).CreateToken(ctx, cur.account, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(k.lifetime / time.Second)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Node", Name: k.node},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting a token of %s/%s bound to Node %s: %w", cur.namespace, cur.account, k.node, err)
	}
	next, err := parse(tr.Status.Token)
	if err != nil {
		return fmt.Errorf("the token the API server issued: %w", err)
	}
	k.mu.Lock()
	k.current = next
	k.mu.Unlock()
	logf.FromContext(ctx).WithName("lease-token").Info("refreshed the Lease identity's token", "node", next.node, "expires", next.expires)
	return k.writeFile(next.raw)
}

// adoptFile takes the token in tokenFile when it is another, issued later than the current
// one: an operator ran hack/agent-lease-credentials.sh again.
func (k *Keeper) adoptFile(ctx context.Context) {
	t, err := k.readFile()
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if t.raw != k.current.raw && t.issued.After(k.current.issued) {
		k.current = t
		logf.FromContext(ctx).WithName("lease-token").Info("took the token written to the token file", "file", k.path, "node", t.node)
	}
}

func (k *Keeper) readFile() (token, error) {
	b, err := os.ReadFile(k.path)
	if err != nil {
		return token{}, fmt.Errorf("reading the Lease identity's token: %w", err)
	}
	t, err := parse(strings.TrimSpace(string(b)))
	if err != nil {
		return token{}, fmt.Errorf("the Lease identity's token in %s: %w", k.path, err)
	}
	return t, nil
}

// writeFile replaces tokenFile with raw, atomically, readable by its owner only.
func (k *Keeper) writeFile(raw string) error {
	f, err := os.CreateTemp(filepath.Dir(k.path), ".token-*")
	if err != nil {
		return fmt.Errorf("writing the Lease identity's token to %s: %w", k.path, err)
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(raw)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), k.path)
	}
	if err != nil {
		return fmt.Errorf("writing the Lease identity's token to %s: %w", k.path, err)
	}
	return nil
}

// parse reads the claims of a service-account token (a JWT) without checking its signature:
// the API server checks it; the Keeper only needs to know when to replace it and for whom.
func parse(raw string) (token, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return token{}, errors.New("not a JSON web token")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return token{}, fmt.Errorf("its payload: %w", err)
	}
	var c struct {
		Issued  int64 `json:"iat"`
		Expires int64 `json:"exp"`
		K8s     struct {
			Namespace      string `json:"namespace"`
			ServiceAccount struct {
				Name string `json:"name"`
			} `json:"serviceaccount"`
			Node *struct {
				Name string `json:"name"`
			} `json:"node"`
			Pod *struct{} `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return token{}, fmt.Errorf("its claims: %w", err)
	}
	if c.K8s.Namespace == "" || c.K8s.ServiceAccount.Name == "" {
		return token{}, errors.New("not a service account's token (no kubernetes.io namespace and serviceaccount claims)")
	}
	t := token{raw: raw, namespace: c.K8s.Namespace, account: c.K8s.ServiceAccount.Name,
		issued: time.Unix(c.Issued, 0), expires: time.Unix(c.Expires, 0), valid: c.Expires > c.Issued}
	if c.K8s.Node != nil && c.K8s.Pod == nil {
		t.node = c.K8s.Node.Name
	}
	return t, nil
}
