package v1alpha1

import "testing"

func TestMebibytes(t *testing.T) {
	for _, c := range []struct {
		n        int64
		up, down string
	}{
		{0, "0", "0"},
		{1, "1Mi", "0"},
		{1 << 20, "1Mi", "1Mi"},
		{1<<20 + 1, "2Mi", "1Mi"},
		{12345678, "12Mi", "11Mi"},
		{1 << 30, "1Gi", "1Gi"},
		{1<<30 + 512<<20, "1536Mi", "1536Mi"},
	} {
		up, down := MebibytesUp(c.n), MebibytesDown(c.n)
		if up.String() != c.up || down.String() != c.down {
			t.Errorf("%d bytes: up %s, down %s; want %s, %s", c.n, up.String(), down.String(), c.up, c.down)
		}
	}
}
