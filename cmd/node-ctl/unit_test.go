package main

import (
	"os"
	"strings"
	"testing"

	"github.com/agentcube/sandboxpool/nodectl/api"
)

// TestSystemdUnit checks that deploy/node/node-ctl.service runs node-ctl with the
// contract's default paths and keeps the semantics the agent relies on: restart always
// (the reload fallback), SIGHUP reloads, and stopping node-ctl never kills sandboxes.
func TestSystemdUnit(t *testing.T) {
	data, err := os.ReadFile("../../deploy/node/node-ctl.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(data)
	for _, want := range []string{
		"--socket=" + api.DefaultSocketPath + " ",
		"--config=" + api.DefaultConfigPath + " ",
		"--cgroup-path=" + api.DefaultCgroupPath + " ",
		"--zone=${NODE_CTL_ZONE}",
		"\nRestart=always\n",
		"\nStartLimitIntervalSec=0\n",
		"\nExecReload=/bin/kill -HUP $MAINPID\n",
		"\nKillMode=process\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("node-ctl.service lacks %q", want)
		}
	}
}
