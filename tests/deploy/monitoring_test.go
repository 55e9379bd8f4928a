package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/operator"
)

// ruleFile is a Prometheus rule file: a PrometheusRule's spec.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

const runbookPrefix = "https://github.com/agentcube/sandboxpool/blob/main/docs/operator-guide.md#"

// TestMonitoring: deploy/monitoring renders; every alert is complete (for, severity,
// summary, description, a runbook that exists in the guide) and uses metrics the code
// exports; promtool accepts the rules and their unit tests pass; and the objects pass the
// API server's validation against prometheus-operator's CRDs.
func TestMonitoring(t *testing.T) {
	cp := suite.Require(t)
	dir := filepath.Join(cp.Root, "deploy", "monitoring")
	objs := build(t, cp, dir)
	rule := find(t, objs, "PrometheusRule", "sandbox-pool")
	find(t, objs, "PodMonitor", "sandbox-pool")
	spec, err := json.Marshal(rule.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(spec, &rf); err != nil {
		t.Fatalf("PrometheusRule spec: %v", err)
	}

	t.Run("alerts are complete", func(t *testing.T) {
		anchors := guideAnchors(t, filepath.Join(cp.Root, "docs", "operator-guide.md"))
		exported := exportedMetrics(t, cp.Root)
		n := 0
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				n++
				if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
					t.Errorf("%s: for %q", r.Alert, r.For)
				}
				if s := r.Labels["severity"]; s != "warning" && s != "critical" {
					t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
				}
				for _, a := range []string{"summary", "description", "runbook_url"} {
					if r.Annotations[a] == "" {
						t.Errorf("%s: no %s", r.Alert, a)
					}
				}
				anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookPrefix)
				if !ok || !anchors[anchor] {
					t.Errorf("%s: runbook_url %q is not a section of docs/operator-guide.md", r.Alert, r.Annotations["runbook_url"])
				}
				for _, m := range regexp.MustCompile(`\bsandboxpool_[a-z_]+`).FindAllString(r.Expr, -1) {
					if !exported[m] {
						t.Errorf("%s: metric %s is exported by none of operator/, agent/, webhook/", r.Alert, m)
					}
				}
			}
		}
		if n == 0 {
			t.Fatal("no alert")
		}
	})

	// The pool of a removed node is Unready until the controller deletes it, at the
	// default --node-gone-grace after the node; with a minute for scraping and evaluation
	// that must end before the critical alert's `for`, or every scale-down pages
	// (docs/operator.md, "Pools of nodes that are gone").
	t.Run("a removed node does not page", func(t *testing.T) {
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert != "SandboxPoolsUnready" {
					continue
				}
				d, err := time.ParseDuration(r.For)
				if err != nil {
					t.Fatalf("SandboxPoolsUnready: for %q: %v", r.For, err)
				}
				if operator.DefaultNodeGoneGrace+time.Minute >= d {
					t.Errorf("--node-gone-grace default %s plus 1m of scraping is not shorter than SandboxPoolsUnready's for %s", operator.DefaultNodeGoneGrace, d)
				}
				return
			}
		}
		t.Fatal("no SandboxPoolsUnready alert")
	})

	// The PromQL the guide gives operators is run by promtool below: each ```promql block
	// of docs/operator-guide.md is the expression of a promql_expr_test.
	t.Run("the guide's queries are tested", func(t *testing.T) {
		guide, err := os.ReadFile(filepath.Join(cp.Root, "docs", "operator-guide.md"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(cp.Root, "tests", "deploy", "testdata", "alerts_test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var tests struct {
			Tests []struct {
				PromQLExprTest []struct {
					Expr string `json:"expr"`
				} `json:"promql_expr_test"`
			} `json:"tests"`
		}
		if err := yaml.Unmarshal(b, &tests); err != nil {
			t.Fatal(err)
		}
		tested := map[string]bool{}
		for _, tc := range tests.Tests {
			for _, e := range tc.PromQLExprTest {
				tested[strings.Join(strings.Fields(e.Expr), " ")] = true
			}
		}
		blocks := regexp.MustCompile("(?s)```promql\n(.*?)```").FindAllStringSubmatch(string(guide), -1)
		if len(blocks) == 0 {
			t.Fatal("docs/operator-guide.md has no promql block")
		}
		for _, m := range blocks {
			if q := strings.Join(strings.Fields(m[1]), " "); !tested[q] {
				t.Errorf("the guide's query %q is not a promql_expr_test of tests/deploy/testdata/alerts_test.yaml", q)
			}
		}
	})

	tools := monitoringTools(t)
	promtool := filepath.Join(tools, "promtool")

	t.Run("promtool", func(t *testing.T) {
		tmp := t.TempDir()
		rules, err := yaml.JSONToYAML(spec)
		if err != nil {
			t.Fatal(err)
		}
		tests, err := os.ReadFile(filepath.Join(cp.Root, "tests", "deploy", "testdata", "alerts_test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"rules.yaml": rules, "alerts_test.yaml": tests} {
			if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, args := range [][]string{
			{"check", "rules", "--lint=all", "--lint-fatal", "rules.yaml"},
			{"test", "rules", "alerts_test.yaml"},
		} {
			cmd := exec.Command(promtool, args...)
			cmd.Dir = tmp
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			} else {
				t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
			}
		}
	})

	t.Run("apply", func(t *testing.T) {
		ctx := context.Background()
		crds := filepath.Join(tools, "crds")
		if _, stderr, err := cp.Kubectl(ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
			t.Fatalf("kubectl apply -f %s: %v: %s", crds, err, stderr)
		}
		if _, stderr, err := cp.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds); err != nil {
			t.Fatalf("waiting for the prometheus-operator CRDs: %v: %s", err, stderr)
		}
		if _, stderr, err := cp.Kubectl(ctx, nil, "apply", "-f", filepath.Join(cp.Root, "deploy", "namespace.yaml")); err != nil {
			t.Fatalf("kubectl apply -f deploy/namespace.yaml: %v: %s", err, stderr)
		}
		for _, args := range [][]string{{"apply", "--dry-run=server", "-k", dir}, {"apply", "-k", dir}} {
			if _, stderr, err := cp.Kubectl(ctx, nil, args...); err != nil {
				t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr)
			}
		}
		c, err := client.New(cp.Config, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(o.GroupVersionKind())
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
				t.Errorf("%s: %v", key(o), err)
			}
		}
	})
}

// guideAnchors returns the GitHub anchors of the headings of a Markdown file.
func guideAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return anchors
}

// exportedMetrics returns the sandboxpool_* metric names that appear as string literals
// in the non-test Go files of the components that export metrics.
func exportedMetrics(t *testing.T, root string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	lit := regexp.MustCompile(`"(sandboxpool_[a-z_]+)"`)
	for _, pkg := range []string{"operator", "agent", "webhook"} {
		files, _ := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
				names[m[1]] = true
			}
		}
	}
	if !names["sandboxpool_pools"] {
		t.Fatalf("found no metric names in operator/ (found %v)", names)
	}
	return names
}
