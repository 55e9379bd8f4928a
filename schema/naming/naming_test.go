package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"cuelang.org/go/cue"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/agentcube/sandboxpool/schema"
)

// nodeNameOfLength returns a valid DNS subdomain of exactly n characters (n >= 1).
func nodeNameOfLength(n int) string {
	// Labels of 63 characters joined by dots; the last label takes the rest.
	var b strings.Builder
	for b.Len() < n {
		if b.Len() > 0 && b.Len()%64 == 63 {
			b.WriteByte('.')
			continue
		}
		b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[b.Len()%36])
	}
	s := b.String()
	if strings.HasSuffix(s, ".") { // never end on a dot
		s = s[:len(s)-1] + "z"
	}
	return s
}

func hash8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:8]
}

var tableCases = []struct {
	name     string
	nodeName string
	want     string
}{
	{"short", "worker-1", "placeholder-worker-1"},
	{"exactly 241 characters is kept verbatim", nodeNameOfLength(241), "placeholder-" + nodeNameOfLength(241)},
	{"242 characters is hashed", nodeNameOfLength(242), "placeholder-" + nodeNameOfLength(242)[:232] + "-" + hash8(nodeNameOfLength(242))},
	{"253 characters is hashed", nodeNameOfLength(253), "placeholder-" + nodeNameOfLength(253)[:232] + "-" + hash8(nodeNameOfLength(253))},
}

func TestPoolName(t *testing.T) {
	for _, tc := range tableCases {
		t.Run(tc.name, func(t *testing.T) {
			if errs := validation.IsDNS1123Subdomain(tc.nodeName); len(errs) > 0 {
				t.Fatalf("fixture node name is not a DNS subdomain: %v", errs)
			}
			got := PoolName(tc.nodeName)
			if got != tc.want {
				t.Errorf("PoolName(%d chars) = %q, want %q", len(tc.nodeName), got, tc.want)
			}
			if len(got) > validation.DNS1123SubdomainMaxLength {
				t.Errorf("PoolName(%d chars) has %d characters, more than %d", len(tc.nodeName), len(got), validation.DNS1123SubdomainMaxLength)
			}
		})
	}
}

func TestPoolNameIsDeterministicAndDistinct(t *testing.T) {
	a, b := nodeNameOfLength(253), nodeNameOfLength(252)+"q"
	if first, again := PoolName(a), PoolName(a); first != again {
		t.Fatal("PoolName is not deterministic")
	}
	if a[:232] != b[:232] || PoolName(a) == PoolName(b) {
		t.Fatalf("long names sharing a 232-character prefix must differ by hash: %q", PoolName(a))
	}
}

// randomNodeName returns a random valid DNS subdomain of 1..253 characters, biased towards
// the lengths around the hashing boundary: labels of 1..63 characters (alphanumeric ends,
// '-' inside) joined by '.', cut to the chosen length. A rare invalid cut is drawn again.
func randomNodeName(r *rand.Rand) string {
	const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
	var n int
	switch r.IntN(3) {
	case 0:
		n = 1 + r.IntN(63)
	case 1:
		n = 236 + r.IntN(18) // 236..253
	default:
		n = 1 + r.IntN(253)
	}
	for {
		var b strings.Builder
		for b.Len() < n {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			size := 1 + r.IntN(63)
			for i := range size {
				if i > 0 && i < size-1 && r.IntN(6) == 0 {
					b.WriteByte('-')
				} else {
					b.WriteByte(alnum[r.IntN(len(alnum))])
				}
			}
		}
		s := []byte(b.String()[:n])
		s[n-1] = alnum[r.IntN(len(alnum))]
		if len(validation.IsDNS1123Subdomain(string(s))) == 0 {
			return string(s)
		}
	}
}

// TestPoolNameAgreesWithCUE proves the Go function and the schema's #PoolName, the single
// source of truth, give the same name for the table cases and 200 random node names.
func TestPoolNameAgreesWithCUE(t *testing.T) {
	def := schema.MustCompiled().Lookup("#PoolName")
	if err := def.Err(); err != nil {
		t.Fatalf("looking up #PoolName: %v", err)
	}
	cuePoolName := func(nodeName string) (string, error) {
		return def.FillPath(cue.ParsePath("nodeName"), nodeName).LookupPath(cue.ParsePath("out")).String()
	}

	names := make([]string, 0, len(tableCases)+200)
	for _, tc := range tableCases {
		names = append(names, tc.nodeName)
	}
	r := rand.New(rand.NewPCG(20240601, 1))
	for range 200 {
		names = append(names, randomNodeName(r))
	}

	hashed := 0
	for _, nodeName := range names {
		if errs := validation.IsDNS1123Subdomain(nodeName); len(errs) > 0 {
			t.Fatalf("generated node name %q is not a DNS subdomain: %v", nodeName, errs)
		}
		want, err := cuePoolName(nodeName)
		if err != nil {
			t.Fatalf("#PoolName(%q): %v", nodeName, err)
		}
		if got := PoolName(nodeName); got != want {
			t.Errorf("PoolName(%q) = %q, #PoolName gives %q", nodeName, got, want)
		}
		if len(nodeName) > MaxUnhashedNodeNameLength {
			hashed++
		}
	}
	if hashed < 20 {
		t.Errorf("only %d of %d node names exercise the hashed form", hashed, len(names))
	}
}

func TestLabelValue(t *testing.T) {
	for _, n := range []int{1, 62, 63, 64, 200, 253} {
		node := nodeNameOfLength(n)
		got := LabelValue(node)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("LabelValue(%d chars) = %q is not a label value: %v", n, got, errs)
		}
		switch {
		case n <= 63 && got != node:
			t.Errorf("LabelValue(%d chars) = %q, want the node name itself", n, got)
		case n > 63 && got != node[:54]+"-"+hash8(node):
			t.Errorf("LabelValue(%d chars) = %q, want the first 54 characters, - and the hash", n, got)
		}
	}
	// Two long names with the same first 54 characters stay distinct.
	a, b := nodeNameOfLength(100), nodeNameOfLength(100)[:99]+"q"
	if LabelValue(a) == LabelValue(b) {
		t.Errorf("LabelValue is the same for two different long names: %q", LabelValue(a))
	}
}
