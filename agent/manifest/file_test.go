package manifest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

func TestFileName(t *testing.T) {
	long := strings.Repeat("p", 253)
	cases := []struct {
		pool  string
		piece int
		file  string
	}{
		{"placeholder-node-a", 1, "sandbox-pool-placeholder-node-a_1.yaml"},
		{"placeholder-node-a", 0, "sandbox-pool-placeholder-node-a.yaml"},
		{"placeholder-ip-10-0-0-1.ec2.internal", 42, "sandbox-pool-placeholder-ip-10-0-0-1.ec2.internal_42.yaml"},
		{strings.Repeat("p", MaxFileKeyLength), MaxPiece, "sandbox-pool-" + strings.Repeat("p", MaxFileKeyLength) + "_999999.yaml"},
		{long, 3, "sandbox-pool-" + strings.Repeat("p", 191) + "-" + hashOf([]byte(long))[:8] + "_3.yaml"},
	}
	for _, tc := range cases {
		got := FileName(tc.pool, tc.piece)
		if got != tc.file {
			t.Errorf("FileName(%d characters, %d) = %q, want %q", len(tc.pool), tc.piece, got, tc.file)
		}
		if ok, _ := filepath.Match(FilePattern, got); !ok {
			t.Errorf("%q does not match %s", got, FilePattern)
		}
		key, piece, ok := ParseFileName(got)
		if !ok || key != FileKey(tc.pool) || piece != tc.piece || FileName(key, piece) != got {
			t.Errorf("ParseFileName(%q) = %q, %d, %v; want FileKey %q, %d", got, key, piece, ok, FileKey(tc.pool), tc.piece)
		}
	}
	if FileKey(long) == FileKey(long[:252]+"q") {
		t.Error("two long pool names share a file")
	}
	for _, name := range []string{"sandbox-pool-.yaml", "sandbox-pool-a.yml", "other.yaml", ".sandbox-pool-a.yaml.tmp-1",
		"sandbox-pool-a.yaml~", "sandbox-pool-_1.yaml", "sandbox-pool-a_0.yaml", "sandbox-pool-a_01.yaml", "sandbox-pool-a_x.yaml",
		"sandbox-pool-a_-1.yaml"} {
		if key, piece, ok := ParseFileName(name); ok {
			t.Errorf("ParseFileName(%q) = %q, %d, true; want false", name, key, piece)
		}
	}
}

// TestParsePiece: a file's piece number and its pod's name must agree, and the single file
// of agents before pieces (piece 0, pod sandbox-pool) is still read.
func TestParsePiece(t *testing.T) {
	s := testSpec()
	s.Piece = 7
	data := mustRender(t, s)
	f, err := Parse(FileName(s.PoolName, 7), data)
	if err != nil || f.Piece != 7 {
		t.Fatalf("Parse = %+v, %v; want piece 7", f, err)
	}
	if _, err := Parse(FileName(s.PoolName, 8), data); !errors.Is(err, ErrNotManifest) {
		t.Errorf("Parse of piece 7's pod under piece 8's name = %v, want ErrNotManifest", err)
	}
	legacy := bytes.Replace(data, []byte("name: sandbox-pool-7\n"), []byte("name: sandbox-pool\n"), 1)
	if f, err := Parse(FileName(s.PoolName, 0), legacy); err != nil || f.Piece != 0 {
		t.Errorf("Parse of the single file of agents before pieces = %+v, %v; want piece 0", f, err)
	}
}

// TestPieces: the manifests of one pool, in piece order; other pools' files and unreadable
// files of other pools are no concern of it.
func TestPieces(t *testing.T) {
	dir := t.TempDir()
	s := testSpec()
	for _, piece := range []int{12, 3, 7} {
		s.Piece = piece
		if err := Write(dir, s.PoolName, piece, mustRender(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	other := testSpec()
	other.PoolName = "placeholder-node-b"
	if err := Write(dir, other.PoolName, 1, mustRender(t, other)); err != nil {
		t.Fatal(err)
	}
	writeRaw(t, dir, FileName("placeholder-node-c", 1), []byte("not yaml: ["))
	files, errs := Pieces(dir, s.PoolName)
	var got []int
	for _, f := range files {
		got = append(got, f.Piece)
	}
	if !slices.Equal(got, []int{3, 7, 12}) || len(errs) != 0 {
		t.Errorf("Pieces = %v, %v; want [3 7 12] and no error", got, errs)
	}
	writeRaw(t, dir, FileName(s.PoolName, 20), []byte("not yaml: ["))
	if _, errs := Pieces(dir, s.PoolName); len(errs) != 1 {
		t.Errorf("Pieces with a broken file of the pool: errors %v, want one", errs)
	}
	if err := RemovePool(dir, s.PoolName); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); !slices.Equal(names, []string{FileName("placeholder-node-b", 1), FileName("placeholder-node-c", 1)}) {
		t.Errorf("after RemovePool the directory holds %v", names)
	}
}

func TestReadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := testSpec()
	data := mustRender(t, s)
	if err := Write(dir, s.PoolName, 1, data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName(s.PoolName, 1))
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
	replace := func(old, with string) []byte { return bytes.Replace(good, []byte(old), []byte(with), 1) }
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
		if err := Write(dir, s.PoolName, 1, mustRender(t, s)); err != nil {
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
