package shimapi

import "testing"

func TestSocketPath(t *testing.T) {
	for address, want := range map[string]string{
		"/run/sandbox-pool/agent.sock":        "/run/sandbox-pool/agent.sock",
		"unix:///run/sandbox-pool/agent.sock": "/run/sandbox-pool/agent.sock",
		"tcp://127.0.0.1:9000":                "",
		"unix://":                             "",
		"":                                    "",
	} {
		got, err := SocketPath(address)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", address, got, err, want)
		}
	}
}
