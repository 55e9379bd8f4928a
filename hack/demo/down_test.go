package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/tests/e2e/stack"
)

// The test binary plays the demo program: started with fakeRunnerEnv set it waits to be
// killed, as `demo serve` runs until stopped; run as `<binary> down --dir=D` it writes its
// arguments to $fakeDownFile, as `demo down` would stop the demo.
const (
	fakeRunnerEnv = "SANDBOXPOOL_FAKE_DEMO_RUNNER"
	fakeDownFile  = "SANDBOXPOOL_FAKE_DEMO_DOWN"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "down" {
		if err := os.WriteFile(os.Getenv(fakeDownFile), []byte(strings.Join(os.Args[1:], " ")), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(fakeRunnerEnv) != "" {
		// Block until a signal, as `demo serve` does (a bare select{} is a deadlock the
		// runtime kills when cgo is off, as make test builds).
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
		<-stop
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// demoDown runs `make demo-down` with DEMO_DIR and DEMO_BIN, and a `go` first on PATH
// that records being run, and returns make's output, whether it succeeded and whether
// anything ran go.
func demoDown(t *testing.T, dir, bin string, env ...string) (out string, ok, compiled bool) {
	t.Helper()
	root, err := corpus.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	fakeGo := t.TempDir()
	goRan := filepath.Join(fakeGo, "go-ran")
	script := "#!/bin/sh\necho \"$@\" >> " + goRan + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(fakeGo, "go"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "demo-down", "DEMO_DIR="+dir, "DEMO_BIN="+bin)
	cmd.Env = append(os.Environ(), append(env, "PATH="+fakeGo+":"+os.Getenv("PATH"))...)
	b, err := cmd.CombinedOutput()
	_, statErr := os.Stat(goRan)
	return string(b), err == nil, statErr == nil
}

// TestDemoDownCompilesNothing: make demo-down stops the demo with the demo binary make
// demo built; without it, with the running demo's own program; without either it says
// how to get the binary back. In no case does it run go.
func TestDemoDownCompilesNothing(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "demo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(tmp, "bin", "sandboxpool-demo")
	downFile := filepath.Join(tmp, "down-args")
	readDown := func() string {
		b, _ := os.ReadFile(downFile)
		_ = os.Remove(downFile)
		return string(b)
	}
	wantArgs := "down --dir=" + dir

	t.Run("no demo", func(t *testing.T) {
		out, ok, compiled := demoDown(t, dir, missing)
		if !ok || compiled || !strings.Contains(out, "no demo running") {
			t.Errorf("ok %t, ran go %t, output:\n%s", ok, compiled, out)
		}
	})

	t.Run("the demo binary", func(t *testing.T) {
		out, ok, compiled := demoDown(t, dir, self, fakeDownFile+"="+downFile)
		if got := readDown(); !ok || compiled || got != wantArgs {
			t.Errorf("ok %t, ran go %t, the binary ran with %q, want %q; output:\n%s", ok, compiled, got, wantArgs, out)
		}
	})

	// The runner, a copy of the test binary that is removed once it runs, as bin/ is by make
	// clean.
	copied := filepath.Join(tmp, "runner")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b, 0o755); err != nil {
		t.Fatal(err)
	}
	runner := exec.Command(copied)
	runner.Env = append(os.Environ(), fakeRunnerEnv+"=1")
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = runner.Wait(); close(exited) }()
	stopRunner := func() {
		_ = runner.Process.Kill()
		<-exited
	}
	defer stopRunner()
	if err := os.Remove(copied); err != nil {
		t.Fatal(err)
	}
	// Another process first, as stack.State lists the control plane's: its pid and start
	// time must not be taken for the runner's.
	other := stack.RecordOf("etcd", os.Getpid())
	st := stack.State{Runner: stack.RecordOf("runner", runner.Process.Pid), Dir: dir, Processes: []stack.ProcessRecord{other}}
	if !st.Runner.Alive() {
		t.Fatalf("runner record %+v is not alive", st.Runner)
	}
	if err := stack.WriteState(filepath.Join(dir, stack.StateFile), st); err != nil {
		t.Fatal(err)
	}

	t.Run("the runner's program", func(t *testing.T) {
		out, ok, compiled := demoDown(t, dir, missing, fakeDownFile+"="+downFile)
		if got := readDown(); !ok || compiled || got != wantArgs || !strings.Contains(out, fmt.Sprintf("/proc/%d/exe", runner.Process.Pid)) {
			t.Errorf("ok %t, ran go %t, the runner's program ran with %q, want %q; output:\n%s", ok, compiled, got, wantArgs, out)
		}
	})

	t.Run("a pid reused by another process", func(t *testing.T) {
		reused := st
		reused.Runner.StartTime++ // the same pid, started at another time: not the runner
		if err := stack.WriteState(filepath.Join(dir, stack.StateFile), reused); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = stack.WriteState(filepath.Join(dir, stack.StateFile), st) }()
		out, ok, compiled := demoDown(t, dir, missing, fakeDownFile+"="+downFile)
		if got := readDown(); ok || compiled || got != "" || !strings.Contains(out, "Build the demo binary") {
			t.Errorf("ok %t, ran go %t, ran %q; want a failure naming how to build the binary; output:\n%s", ok, compiled, got, out)
		}
	})

	t.Run("nothing left", func(t *testing.T) {
		stopRunner() // reaped when it returns
		if st.Runner.Alive() {
			t.Fatal("the runner still runs")
		}
		out, ok, compiled := demoDown(t, dir, missing, fakeDownFile+"="+downFile)
		if got := readDown(); ok || compiled || got != "" || !strings.Contains(out, "Build the demo binary") || !strings.Contains(out, missing) {
			t.Errorf("ok %t, ran go %t, ran %q; want a failure naming %s and how to build it; output:\n%s", ok, compiled, got, missing, out)
		}
	})
}
