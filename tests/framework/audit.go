package framework

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// auditPolicy records every write (and nothing else) at Metadata level: who changed what.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

// auditDirPrefix names the temporary directory of WithAuditLog, removed by Stop.
const auditDirPrefix = "sandboxpool-audit-"

// WithAuditLog makes the API server write an audit log of every write request into a
// temporary directory (ControlPlane.AuditLog; Stop removes it), so a test can count the
// writes of one identity (AuditEvents).
func WithAuditLog() Option {
	return func(env *envtest.Environment, _ string) {
		dir, err := os.MkdirTemp("", auditDirPrefix)
		if err != nil {
			panic(err) // only reached from TestMain set-up
		}
		path := filepath.Join(dir, "audit.log")
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
			panic(err)
		}
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", path)
		args.Set("audit-log-mode", "blocking") // every event is on disk when the response is
	}
}

// AuditLog is the path of the API server's audit log (WithAuditLog), "" without one.
func (c *ControlPlane) AuditLog() string {
	if path := c.Env.ControlPlane.GetAPIServer().Configure().Get("audit-log-path").Get(nil); len(path) == 1 {
		return path[0]
	}
	return ""
}

// AuditEvent is the part of an audit.k8s.io/v1 Event the tests read.
type AuditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// AuditEvents reads the ResponseComplete events of the audit log at path whose response was
// sent in [from, to).
func AuditEvents(path string, from, to time.Time) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", path, err)
		}
		if e.Stage == "ResponseComplete" && !e.StageTimestamp.Before(from) && e.StageTimestamp.Before(to) {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// WithNodeAuthorizer runs the API server with the Node authorizer before RBAC, as real
// clusters do: a node identity (system:node:<name> in system:nodes) may read the pods bound
// to its node, which is how the placeholder agent reads its mirror pod.
func WithNodeAuthorizer() Option {
	return func(env *envtest.Environment, _ string) {
		env.ControlPlane.GetAPIServer().Configure().Set("authorization-mode", "Node,RBAC")
	}
}

// WithNodeRestriction adds the NodeRestriction admission plugin to the API server's default
// plugins (Priority and RuntimeClass among them), as production clusters run it: a node
// identity may create only mirror pods bound to itself, and write no Lease but its own in
// kube-node-lease.
func WithNodeRestriction() Option {
	return func(env *envtest.Environment, _ string) {
		env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "NodeRestriction")
	}
}

// WithTokenFile makes the API server authenticate the static bearer tokens of path
// (--token-auth-file: a line "token,user,uid,\"group1,group2\"" each), for many identities at
// once where a client certificate each would take long to make (the hollow nodes').
func WithTokenFile(path string) Option {
	return func(env *envtest.Environment, _ string) {
		env.ControlPlane.GetAPIServer().Configure().Set("token-auth-file", path)
	}
}
