package integration

import (
	"strings"
	"testing"
)

func TestPrinterColumns(t *testing.T) {
	requireCluster(t)
	kubectl(t, classYAML("columns"), "apply", "-f", "-")
	t.Cleanup(func() { _, _, _ = kubectlErr(t, "", "delete", "sandboxpoolclass", "columns", "--wait=false") })
	kubectl(t, poolYAML("columns-node", "columns")+"  override: {enabled: true, reason: test, resourcePolicy: {resources: {cpu: 1, memory: 1Gi}}}\n", "apply", "-f", "-")
	t.Cleanup(func() {
		_, _, _ = kubectlErr(t, "", "delete", "sandboxpool", "placeholder-columns-node", "--wait=false")
	})
	status := `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPool",
		"metadata":{"name":"placeholder-columns-node"},
		"status":{"phase":"Ready","resize":{"status":"Completed"},
		          "capacity":{"cpu":"500m","memory":"256Mi","allocatedMemory":"13Mi"},
		          "poolInfo":{"zone":"zone-a","allocatableMemoryBytes":268435456,"allocatedMemoryBytes":13000000}}}`
	kubectl(t, status, "apply", "--server-side", "--subresource=status", "--field-manager=sandboxpool-controller", "-f", "-")

	out := kubectl(t, "", "get", "sandboxpools", "placeholder-columns-node")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want header and one row:\n%s", out)
	}
	header := strings.Fields(lines[0])
	wantHeader := []string{"NAME", "PHASE", "NODE", "CLASS", "CPU", "MEMORY", "ALLOCATED", "RESIZE", "OVERRIDE", "ZONE", "AGE"}
	if strings.Join(header, " ") != strings.Join(wantHeader, " ") {
		t.Errorf("columns:\n got %v\nwant %v", header, wantHeader)
	}
	row := strings.Fields(lines[1])
	wantRow := []string{"placeholder-columns-node", "Ready", "columns-node", "columns", "500m", "256Mi", "13Mi", "Completed", "true", "zone-a"}
	if len(row) < len(wantRow) || strings.Join(row[:len(wantRow)], " ") != strings.Join(wantRow, " ") {
		t.Errorf("row:\n got %v\nwant %v …", row, wantRow)
	}

	classStatus := `{"apiVersion":"sandboxpool.agentcube.volcano.sh/v1alpha1","kind":"SandboxPoolClass",
		"metadata":{"name":"columns"},
		"status":{"totalSandboxPools":3,"readySandboxPools":2,"notReadySandboxPools":1,
		          "capacity":{"cpu":"1500m","memory":"768Mi","allocatedMemory":"13Mi","freeMemory":"499Mi"}}}`
	kubectl(t, classStatus, "apply", "--server-side", "--subresource=status", "--field-manager=sandboxpool-controller", "-f", "-")
	out = kubectl(t, "", "get", "spc", "columns")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if h := strings.Fields(lines[0]); strings.Join(h, " ") != "NAME TOTAL READY NOTREADY CPU MEMORY ALLOCATED FREE AGE" {
		t.Errorf("class columns: %v", h)
	}
	if r := strings.Fields(lines[len(lines)-1]); len(r) < 8 || strings.Join(r[:8], " ") != "columns 3 2 1 1500m 768Mi 13Mi 499Mi" {
		t.Errorf("class row: %v", r)
	}
}

func TestKubectlExplainShowsFieldDocs(t *testing.T) {
	requireCluster(t)
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"sandboxpool.spec.override", []string{
			"override replaces the class policy on this one node when",
			"enabled", "makes the agent use override.resourcePolicy",
			"reason", "says why this node differs",
		}},
		{"sandboxpoolclass.spec.selector", []string{"Immutable: changing it would mass-delete"}},
		{"sandboxpool.status.conditions", []string{"one entry each: a map list keyed by type, so each writer owns its own entries"}},
	} {
		out := kubectl(t, "", "explain", tc.path)
		flat := strings.Join(strings.Fields(out), " ")
		for _, w := range tc.want {
			if !strings.Contains(flat, w) {
				t.Errorf("kubectl explain %s does not show %q:\n%s", tc.path, w, out)
			}
		}
	}
}

// TestFieldSelectorByNode: the API server filters pools by spec.nodeName (a selectable
// field of the CRD), which is how each agent lists and watches only its own node's pools.
func TestFieldSelectorByNode(t *testing.T) {
	requireCluster(t)
	for _, n := range []string{"fs-a", "fs-b"} {
		kubectl(t, poolYAML(n, "fs-class"), "apply", "-f", "-")
		t.Cleanup(func() { _, _, _ = kubectlErr(t, "", "delete", "sandboxpool", "placeholder-"+n) })
	}
	out := kubectl(t, "", "get", "sandboxpools", "--field-selector", "spec.nodeName=fs-b", "-o", "name")
	if strings.TrimSpace(out) != "sandboxpool.sandboxpool.agentcube.volcano.sh/placeholder-fs-b" {
		t.Errorf("field selector spec.nodeName=fs-b returned %q, want only placeholder-fs-b", out)
	}
	out = kubectl(t, "", "get", "sandboxpools", "--field-selector", "spec.classRef.name=fs-class", "-o", "name")
	if got := len(strings.Fields(out)); got != 2 {
		t.Errorf("field selector spec.classRef.name=fs-class returned %d pools, want 2: %q", got, out)
	}
}
