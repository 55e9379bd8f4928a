package operator

import (
	"flag"
	"strings"
	"testing"
)

// TestNodeGoneGraceFlag: the flag parses, defaults to DefaultNodeGoneGrace, and a zero or
// negative value is refused with an error naming it.
func TestNodeGoneGraceFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr bool
	}{
		{nil, false},
		{[]string{"--node-gone-grace=30s"}, false},
		{[]string{"--node-gone-grace=0"}, true},
		{[]string{"--node-gone-grace=-1m"}, true},
	} {
		o := DefaultOptions()
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if tc.args == nil && o.NodeGoneGrace != DefaultNodeGoneGrace {
			t.Errorf("default %s, want %s", o.NodeGoneGrace, DefaultNodeGoneGrace)
		}
		err := o.Validate()
		if got := err != nil && strings.Contains(err.Error(), "--node-gone-grace"); got != tc.wantErr || (err != nil && !tc.wantErr) {
			t.Errorf("%v: Validate() = %v, want an error naming --node-gone-grace: %v", tc.args, err, tc.wantErr)
		}
	}
}
