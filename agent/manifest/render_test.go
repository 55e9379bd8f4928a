package manifest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/agentcube/sandboxpool/schema/naming"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestRenderGolden(t *testing.T) {
	cases := []struct {
		golden string
		spec   func() Spec
	}{
		{"placeholder-pod.yaml", testSpec},
		{"placeholder-pod-netns-minimal.yaml", func() Spec {
			return Spec{
				PoolName: "placeholder-node-b", PoolUID: "uid-b", ClassName: "minimal", NodeName: "node-b", Piece: 12,
				Resources: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("1Gi"),
				},
				Namespace: "sandboxes", Image: "localhost/pause:test", NetnsEnabled: true,
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.golden, func(t *testing.T) {
			got := mustRender(t, tc.spec())
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Render differs from %s (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
			}
		})
	}
}

// TestRenderDeterministic renders the same Spec from maps filled in different orders, many
// times: the bytes never change.
func TestRenderDeterministic(t *testing.T) {
	resources := []struct {
		name corev1.ResourceName
		q    string
	}{{"cpu", "4"}, {"memory", "16Gi"}, {"hugepages-2Mi", "1Gi"}, {"example.com/gpu", "1"}, {"ephemeral-storage", "10Gi"}}
	annotations := [][2]string{{"a.example.com/x", "1"}, {"z.example.com/y", "2"}, {"m.example.com/z", "3"}, {"b", "4"}}
	build := func(reverse bool) Spec {
		s := testSpec()
		s.Resources = corev1.ResourceList{}
		s.Template.Annotations = map[string]string{}
		rs, as := slices.Clone(resources), slices.Clone(annotations)
		if reverse {
			slices.Reverse(rs)
			slices.Reverse(as)
		}
		for _, r := range rs {
			s.Resources[r.name] = resource.MustParse(r.q)
		}
		for _, a := range as {
			s.Template.Annotations[a[0]] = a[1]
		}
		return s
	}
	first := mustRender(t, build(false))
	for i := range 50 {
		if got := mustRender(t, build(i%2 == 1)); !bytes.Equal(got, first) {
			t.Fatalf("render %d differs:\n%s\n--- first\n%s", i, got, first)
		}
	}
	// The same quantity written differently, in the same format (decimal or binary
	// suffixes), is the same manifest.
	s := build(false)
	s.Resources[corev1.ResourceCPU] = resource.MustParse("4000m")
	s.Resources[corev1.ResourceMemory] = resource.MustParse("16384Mi")
	if got := mustRender(t, s); !bytes.Equal(got, first) {
		t.Errorf("equal quantities in another notation render differently:\n%s", got)
	}
}

// TestRenderLeavesSpecAlone: Render copies what it takes from the Spec, so a caller may
// keep and change its Spec.
func TestRenderLeavesSpecAlone(t *testing.T) {
	s := testSpec()
	before := testSpec()
	data := mustRender(t, s)
	if !equality.Semantic.DeepEqual(s, before) {
		t.Errorf("Render changed its Spec: %+v", s)
	}
	s.Template.Annotations["example.com/team"] = "changed"
	s.Template.Tolerations[1].TolerationSeconds = ptr.To[int64](1)
	s.Resources[corev1.ResourceCPU] = resource.MustParse("1")
	if again := mustRender(t, testSpec()); !bytes.Equal(again, data) {
		t.Error("a later change to the Spec reached an earlier render")
	}
}

func TestRenderPod(t *testing.T) {
	s := testSpec()
	// The template may not override the agent's own annotations.
	s.Template.Annotations[v1alpha1.AnnotationPoolName] = "other"
	s.Template.Annotations[v1alpha1.AnnotationPoolUID] = "other"
	s.Template.Annotations[v1alpha1.AnnotationSkipCgroup] = "false"
	s.Template.Annotations[v1alpha1.AnnotationManifestHash] = "0000"
	pod := decodePod(t, mustRender(t, s))

	if want := v1alpha1.PlaceholderPodName + "-1"; pod.Name != want || pod.Namespace != v1alpha1.DefaultPodNamespace {
		t.Errorf("name %s/%s, want %s/%s", pod.Namespace, pod.Name, v1alpha1.DefaultPodNamespace, want)
	}
	wantLabels := map[string]string{
		v1alpha1.LabelClass: "default", v1alpha1.LabelNode: "node-a",
		v1alpha1.LabelPoolName: "placeholder-node-a", v1alpha1.LabelSkipCgroup: "true",
	}
	if !equality.Semantic.DeepEqual(pod.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", pod.Labels, wantLabels)
	}
	for k, want := range map[string]string{
		"example.com/team":            "agents",
		v1alpha1.AnnotationPoolName:   s.PoolName,
		v1alpha1.AnnotationPoolUID:    s.PoolUID,
		v1alpha1.AnnotationSkipCgroup: "true",
	} {
		if got := pod.Annotations[k]; got != want {
			t.Errorf("annotation %s = %q, want %q", k, got, want)
		}
	}
	if h := pod.Annotations[v1alpha1.AnnotationManifestHash]; len(h) != 64 {
		t.Errorf("annotation %s = %q, want 64 hex characters", v1alpha1.AnnotationManifestHash, h)
	}

	spec := pod.Spec
	if !spec.HostNetwork {
		t.Error("hostNetwork false without netns")
	}
	if ptr.Deref(spec.RuntimeClassName, "") != "placeholder" {
		t.Errorf("runtimeClassName %v", spec.RuntimeClassName)
	}
	if spec.PriorityClassName != "sandbox-pool" || ptr.Deref(spec.Priority, 0) != 1000000 {
		t.Errorf("priority %q %v, want both the class name and its value", spec.PriorityClassName, spec.Priority)
	}
	if !equality.Semantic.DeepEqual(spec.Tolerations, s.Template.Tolerations) {
		t.Errorf("tolerations %v, want %v", spec.Tolerations, s.Template.Tolerations)
	}
	if ptr.Deref(spec.EnableServiceLinks, true) || ptr.Deref(spec.AutomountServiceAccountToken, true) {
		t.Error("service links or the service account token are enabled")
	}
	if ptr.Deref(spec.TerminationGracePeriodSeconds, -1) != 0 {
		t.Errorf("terminationGracePeriodSeconds %v, want 0", spec.TerminationGracePeriodSeconds)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Name != ContainerName || c.Image != s.Image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("container %s %s %s", c.Name, c.Image, c.ImagePullPolicy)
	}
	if !equality.Semantic.DeepEqual(c.Resources.Requests, s.Resources) || !equality.Semantic.DeepEqual(c.Resources.Limits, s.Resources) {
		t.Errorf("requests %v, limits %v, want both %v", c.Resources.Requests, c.Resources.Limits, s.Resources)
	}
}

func TestRenderNetns(t *testing.T) {
	for _, netns := range []bool{false, true} {
		s := testSpec()
		s.NetnsEnabled = netns
		data := mustRender(t, s)
		if got := decodePod(t, data).Spec.HostNetwork; got == netns {
			t.Errorf("netns %v: hostNetwork %v", netns, got)
		}
		if has := bytes.Contains(data, []byte("hostNetwork")); has == netns {
			t.Errorf("netns %v: hostNetwork written: %v", netns, has)
		}
	}
}

// TestRenderPriority: each of priority and priorityClassName is written when the template
// has it, and only then.
func TestRenderPriority(t *testing.T) {
	cases := []struct {
		name      string
		priority  *int32
		className string
	}{
		{"both", ptr.To[int32](1000), "sandbox-pool"},
		{"number only", ptr.To[int32](0), ""},
		{"class only", nil, "sandbox-pool"},
		{"neither", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec()
			s.Template.Priority, s.Template.PriorityClassName = tc.priority, tc.className
			pod := decodePod(t, mustRender(t, s))
			if !equality.Semantic.DeepEqual(pod.Spec.Priority, tc.priority) || pod.Spec.PriorityClassName != tc.className {
				t.Errorf("priority %v %q, want %v %q", pod.Spec.Priority, pod.Spec.PriorityClassName, tc.priority, tc.className)
			}
		})
	}
}

// TestRenderLongNames: the longest names still give valid label values, a valid mirror pod
// name, and the full names in the annotation.
func TestRenderLongNames(t *testing.T) {
	longest := func(n int) string { // a DNS subdomain of n characters, labels of 62
		b := []byte(strings.Repeat("a", n))
		for i := 62; i < n-1; i += 63 {
			b[i] = '.'
		}
		return string(b)
	}
	node := longest(MaxNodeNameLength)
	cases := []struct{ name, node, pool, class string }{
		{"short", "node-a", "placeholder-node-a", "default"},
		{"63", longest(63), naming.PoolName(longest(63)), longest(63)},
		{"64", longest(64), naming.PoolName(longest(64)), longest(64)},
		{"longest node", node, naming.PoolName(node), longest(253)},
		{"longest pool", "n", longest(253), "c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec()
			s.NodeName, s.PoolName, s.ClassName = tc.node, tc.pool, tc.class
			s.Piece = MaxPiece // the longest pod name
			pod := decodePod(t, mustRender(t, s))
			for k, v := range pod.Labels {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("label %s=%q: %v", k, v, errs)
				}
			}
			if got := pod.Labels[v1alpha1.LabelPoolName]; got != naming.LabelValue(tc.pool) {
				t.Errorf("pool label %q, want %q", got, naming.LabelValue(tc.pool))
			}
			if got := pod.Annotations[v1alpha1.AnnotationPoolName]; got != tc.pool {
				t.Errorf("pool annotation %q, want the full name %q", got, tc.pool)
			}
			mirror := pod.Name + "-" + tc.node
			if errs := validation.IsDNS1123Subdomain(mirror); len(errs) > 0 {
				t.Errorf("mirror pod name %q: %v", mirror, errs)
			}
			if n := len(tempPattern(FileName(tc.pool, MaxPiece))) + 10; n > 255 {
				t.Errorf("temporary file name of %d bytes", n)
			}
		})
	}
}

// TestManifestHash checks the documented definition: the hash is the SHA-256 of the same
// manifest without the hash annotation's line.
func TestManifestHash(t *testing.T) {
	data := mustRender(t, testSpec())
	var without [][]byte
	var hash string
	prefix := "    " + v1alpha1.AnnotationManifestHash + ": "
	for line := range bytes.Lines(data) {
		if h, ok := strings.CutPrefix(string(line), prefix); ok {
			hash = strings.TrimSpace(h)
			continue
		}
		without = append(without, line)
	}
	sum := sha256.Sum256(bytes.Join(without, nil))
	if want := hex.EncodeToString(sum[:]); hash != want {
		t.Errorf("manifest-hash %q, want %q", hash, want)
	}
	f, err := Parse("", data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Hash != hash {
		t.Errorf("Parse: Hash %q, want %q", f.Hash, hash)
	}
	if err := f.Verify(); err != nil {
		t.Errorf("Verify of a fresh render: %v", err)
	}
	other := testSpec()
	other.Resources[corev1.ResourceCPU] = resource.MustParse("5")
	if g, err := Parse("", mustRender(t, other)); err != nil || g.Hash == f.Hash {
		t.Errorf("another Spec has the same hash %q (%v)", g.Hash, err)
	}
}

// TestVerifyDetectsEveryOneByteEdit changes each byte of a manifest in turn: Verify must
// fail every time.
func TestVerifyDetectsEveryOneByteEdit(t *testing.T) {
	data := mustRender(t, testSpec())
	edited := make([]byte, len(data))
	for i := range data {
		copy(edited, data)
		switch {
		case edited[i] >= '0' && edited[i] < '9', edited[i] >= 'a' && edited[i] < 'z':
			edited[i]++
		default:
			edited[i] = 'x'
		}
		err := File{Path: "edited", Data: edited}.Verify()
		if !errors.Is(err, ErrModified) && !errors.Is(err, ErrNotManifest) {
			t.Fatalf("byte %d %q→%q: Verify = %v, want ErrModified or ErrNotManifest", i, data[i], edited[i], err)
		}
	}
	for name, data := range map[string][]byte{
		"appended newline": append(slices.Clone(data), '\n'),
		"appended comment": append(slices.Clone(data), "# hello\n"...),
		"unknown field":    bytes.Replace(data, []byte("spec:\n"), []byte("spec:\n  unknownField: 1\n"), 1),
		"no hash":          bytes.Replace(data, []byte(v1alpha1.AnnotationManifestHash), []byte("example.com/other"), 1),
	} {
		if err := (File{Data: data}).Verify(); !errors.Is(err, ErrModified) {
			t.Errorf("%s: Verify = %v, want ErrModified", name, err)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		modify func(*Spec)
		field  string // the field the error must name
	}{
		{"no pool name", func(s *Spec) { s.PoolName = "" }, "poolName"},
		{"pool name with a slash", func(s *Spec) { s.PoolName = "../etc" }, "poolName"},
		{"no pool uid", func(s *Spec) { s.PoolUID = "" }, "poolUID"},
		{"no class", func(s *Spec) { s.ClassName = "" }, "className"},
		{"no node", func(s *Spec) { s.NodeName = "" }, "nodeName"},
		{"node name too long for the mirror pod", func(s *Spec) { s.NodeName = strings.Repeat("n", MaxNodeNameLength+1) }, "nodeName"},
		{"bad namespace", func(s *Spec) { s.Namespace = "Not_A_Namespace" }, "namespace"},
		{"no image", func(s *Spec) { s.Image = "" }, "image"},
		{"image with spaces", func(s *Spec) { s.Image = " pause " }, "image"},
		{"no resources", func(s *Spec) { s.Resources = nil }, "resources: Required"},
		{"no piece", func(s *Spec) { s.Piece = 0 }, "piece"},
		{"piece too large", func(s *Spec) { s.Piece = MaxPiece + 1 }, "piece"},
		{"zero cpu", func(s *Spec) { s.Resources[corev1.ResourceCPU] = resource.MustParse("0") }, "resources[cpu]"},
		{"negative memory", func(s *Spec) { s.Resources[corev1.ResourceMemory] = resource.MustParse("-1Gi") }, "resources[memory]"},
		{"negative gpu", func(s *Spec) { s.Resources["example.com/gpu"] = resource.MustParse("-1") }, "resources[example.com/gpu]"},
		{"kubelet's mirror annotation", func(s *Spec) { s.Template.Annotations["kubernetes.io/config.mirror"] = "x" }, "template.annotations[kubernetes.io/config.mirror]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec()
			tc.modify(&s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.field)
			}
			if data, rerr := Render(s); rerr == nil || data != nil {
				t.Errorf("Render = %d bytes, %v; want no bytes and an error", len(data), rerr)
			}
		})
	}
	s := testSpec()
	if err := s.Validate(); err != nil {
		t.Errorf("Validate of the representative Spec: %v", err)
	}
	// Several errors: all named, in the same order every time.
	bad := Spec{Template: v1alpha1.PlaceholderPodTemplate{Annotations: map[string]string{
		"kubernetes.io/config.a": "", "kubernetes.io/config.b": "", "kubernetes.io/config.c": "",
	}}}
	first := bad.Validate().Error()
	for range 20 {
		if got := bad.Validate().Error(); got != first {
			t.Fatalf("Validate message changes between calls:\n%s\n%s", got, first)
		}
	}
	for _, f := range []string{"poolName", "poolUID", "className", "piece", "nodeName", "image", "resources"} {
		if !strings.Contains(first, f) {
			t.Errorf("error of an empty Spec does not name %s: %s", f, first)
		}
	}
}

// TestStaticPodUID: each manifest carries the UID kubelet gives its static pod, 32 hex
// characters derived from the content, so pieces of another number, pool or node (or of
// another content) have other UIDs; Parse returns it, and a UID changed by hand, even with
// the hash recomputed, does not verify.
func TestStaticPodUID(t *testing.T) {
	base := testSpec()
	f, err := Parse("", mustRender(t, base))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.UID) != staticPodUIDLength || strings.Trim(string(f.UID), "0123456789abcdef") != "" {
		t.Fatalf("UID %q, want %d hex characters", f.UID, staticPodUIDLength)
	}
	seen := map[string]string{string(f.UID): "base"}
	for name, change := range map[string]func(*Spec){
		"another piece": func(s *Spec) { s.Piece++ },
		"another pool":  func(s *Spec) { s.PoolUID = "another-uid" },
		"another node":  func(s *Spec) { s.NodeName = "node-z" },
		"another size":  func(s *Spec) { s.Resources[corev1.ResourceCPU] = resource.MustParse("3") },
	} {
		s := testSpec()
		change(&s)
		g, err := Parse("", mustRender(t, s))
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := seen[string(g.UID)]; ok {
			t.Errorf("%s has the UID of %s: %s", name, other, g.UID)
		}
		seen[string(g.UID)] = name
	}
	if again, _ := Parse("", mustRender(t, base)); again.UID != f.UID {
		t.Errorf("the same Spec gave UIDs %s and %s", f.UID, again.UID)
	}

	// Another UID with a hash that matches the content: the UID is not the content's.
	pod, err := decode(f.Data)
	if err != nil {
		t.Fatal(err)
	}
	pod.UID = "0123456789abcdef0123456789abcdef"
	delete(pod.Annotations, v1alpha1.AnnotationManifestHash)
	unhashed, err := marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations[v1alpha1.AnnotationManifestHash] = hashOf(unhashed)
	forged, err := marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := (File{Path: "forged", Data: forged}).Verify(); !errors.Is(err, ErrModified) || !strings.Contains(err.Error(), "metadata.uid") {
		t.Errorf("Verify of a manifest with another UID = %v, want ErrModified naming metadata.uid", err)
	}
}
