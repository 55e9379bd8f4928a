package support

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPollReportsTheLastState(t *testing.T) {
	n := 0
	err := Poll(context.Background(), time.Millisecond, 50*time.Millisecond, nil, func() (bool, string, error) {
		n++
		return false, fmt.Sprintf("call %d", n), nil
	})
	if err == nil || !strings.Contains(err.Error(), "not within 50ms") || !strings.HasSuffix(err.Error(), fmt.Sprintf("last state: call %d", n)) {
		t.Fatalf("want the timeout and the last state, got %v", err)
	}
}

func TestPollEndsWhenStopCloses(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	err := Poll(context.Background(), time.Millisecond, time.Minute, stop, func() (bool, string, error) { return false, "", nil })
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("want ErrStopped, got %v", err)
	}
}

func TestProcRestartsAndAppendsItsLog(t *testing.T) {
	p := NewProc("sh", filepath.Join(t.TempDir(), "sh.log"), "/bin/sh", []string{"-c", "echo run; exec sleep 60"})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill() })
	Eventually(t, "the first run's output", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		return strings.Count(p.Output(), "run\n") == 1, p.Output()
	})
	if err := p.Restart(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "the second run's output", 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		return strings.Count(p.Output(), "run\n") == 2, p.Output()
	})
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, ok := errors.AsType[*exec.ExitError](p.WaitErr()); !ok || p.Running() {
		t.Fatalf("after Kill: running %v, wait error %v", p.Running(), p.WaitErr())
	}
}
