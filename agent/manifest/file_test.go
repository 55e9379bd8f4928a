package manifest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

func TestFileName(t *testing.T) {
	long := strings.Repeat("p", 253)
	cases := []struct {
		pool, file string
	}{
		{"placeholder-node-a", "sandbox-pool-placeholder-node-a.yaml"},
		{strings.Repeat("p", MaxFileKeyLength), "sandbox-pool-" + strings.Repeat("p", MaxFileKeyLength) + ".yaml"},
		{long, "sandbox-pool-" + strings.Repeat("p", 191) + "-" + hashOf([]byte(long))[:8] + ".yaml"},
	}
	for _, tc := range cases {
		got := FileName(tc.pool)
		if got != tc.file {
			t.Errorf("FileName(%d characters) = %q, want %q", len(tc.pool), got, tc.file)
		}
		if ok, _ := filepath.Match(FilePattern, got); !ok {
			t.Errorf("%q does not match %s", got, FilePattern)
		}
		key, ok := PoolFromFileName(got)
		if !ok || key != FileKey(tc.pool) || FileName(key) != got {
			t.Errorf("PoolFromFileName(%q) = %q, %v; want FileKey %q", got, key, ok, FileKey(tc.pool))
		}
	}
	if FileKey(long) == FileKey(long[:252]+"q") {
		t.Error("two long pool names share a file")
	}
	for _, name := range []string{"sandbox-pool-.yaml", "sandbox-pool-a.yml", "other.yaml", ".sandbox-pool-a.yaml.tmp-1", "sandbox-pool-a.yaml~"} {
		if key, ok := PoolFromFileName(name); ok {
			t.Errorf("PoolFromFileName(%q) = %q, true; want false", name, key)
		}
	}
}

func TestReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := testSpec()
	data := mustRender(t, s)
	if err := Write(dir, s.PoolName, data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName(s.PoolName))
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != path || f.PoolName != s.PoolName || f.PoolUID != s.PoolUID || !bytes.Equal(f.Data, data) {
		t.Errorf("Read = %+v", f)
	}
	if !equality.Semantic.DeepEqual(f.Resources, s.Resources) {
		t.Errorf("resources %v, want %v", f.Resources, s.Resources)
	}
	if err := f.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestParseRejects(t *testing.T) {
	good := mustRender(t, testSpec())
	replace := func(old, new string) []byte { return bytes.Replace(good, []byte(old), []byte(new), 1) }
	cases := []struct {
		name, path string
		data       []byte
		want       string // in the message
	}{
		{"empty", "sandbox-pool-placeholder-node-a.yaml", nil, "want v1 Pod"},
		{"a bare pod", "x", []byte("apiVersion: v1\nkind: Pod\n"), "no annotation"},
		{"not yaml", "sandbox-pool-x.yaml", []byte("\t{ not: [yaml"), "sandbox-pool-x.yaml"},
		{"a list", "sandbox-pool-x.yaml", []byte("- a\n- b\n"), "sandbox-pool-x.yaml"},
		{"a deployment", "sandbox-pool-x.yaml", []byte("apiVersion: apps/v1\nkind: Deployment\n"), "want v1 Pod"},
		{"no pool name", "x", replace(v1alpha1.AnnotationPoolName+":", "example.com/a:"), v1alpha1.AnnotationPoolName},
		{"no pool uid", "x", replace(v1alpha1.AnnotationPoolUID+":", "example.com/a:"), v1alpha1.AnnotationPoolUID},
		{"no placeholder container", "x", replace("name: placeholder\n", "name: other\n"), `no container "placeholder"`},
		{"another pool's file", "/m/sandbox-pool-placeholder-node-b.yaml", good, "not the one of pool"},
		{"too big", "x", append(bytes.Repeat([]byte("#"), maxFileSize), '\n'), "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.path, tc.data)
			if !errors.Is(err, ErrNotManifest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want ErrNotManifest mentioning %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error %q does not name the path %q", err, tc.path)
			}
		})
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Read of a missing file = %v", err)
	}
}

func TestList(t *testing.T) {
	dir := t.TempDir()
	a, b := testSpec(), testSpec()
	b.PoolName, b.PoolUID = "placeholder-node-b", "uid-b"
	for _, s := range []Spec{b, a} {
		if err := Write(dir, s.PoolName, mustRender(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	writeRaw(t, dir, "sandbox-pool-broken.yaml", []byte("not: a pod"))
	writeRaw(t, dir, "kube-apiserver.yaml", []byte("apiVersion: v1\nkind: Pod\n"))
	writeRaw(t, dir, "sandbox-pool-x.yml", []byte("x"))
	writeRaw(t, dir, ".sandbox-pool-x.yaml.tmp-1", []byte("x"))
	if err := os.Mkdir(filepath.Join(dir, "sandbox-pool-dir.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}

	files, errs := List(dir)
	var pools []string
	for _, f := range files {
		pools = append(pools, f.PoolName)
	}
	if strings.Join(pools, ",") != "placeholder-node-a,placeholder-node-b" {
		t.Errorf("List pools %v, want both, in name order", pools)
	}
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "sandbox-pool-broken.yaml") || !strings.Contains(errs[1].Error(), "sandbox-pool-dir.yaml") {
		t.Errorf("List errors %v, want the broken file and the directory", errs)
	}

	if files, errs := List(filepath.Join(dir, "missing")); files != nil || errs != nil {
		t.Errorf("List of a missing dir = %v, %v", files, errs)
	}
	notDir := writeRaw(t, dir, "plain", nil)
	if _, errs := List(notDir); len(errs) != 1 || !strings.Contains(errs[0].Error(), notDir) {
		t.Errorf("List of a file = %v", errs)
	}
}

// TestReadResources: Read reports the container's requests, which the agent's resize logic
// compares with what node-ctl applied.
func TestReadResources(t *testing.T) {
	s := testSpec()
	s.Resources = corev1.ResourceList{corev1.ResourceCPU: s.Resources[corev1.ResourceCPU], corev1.ResourceMemory: s.Resources[corev1.ResourceMemory]}
	f, err := Parse("", mustRender(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if f.Resources.Cpu().String() != "4" || f.Resources.Memory().String() != "16Gi" || len(f.Resources) != 2 {
		t.Errorf("resources %v", f.Resources)
	}
}
