package stack

import (
	"context"
	"os"
	"strconv"
	"sync"
	"time"
)

// Unit is a Proc under a supervisor that plays its systemd unit (Restart=always): the
// supervisor starts the process, and starts it again RestartSec after it exited, unless the
// unit is stopped. Each start runs the installed unit file's ExecStart as it reads then
// (readUnit), as systemd does. The stopped state is in memory, or — for node-ctl, whose
// unit the agent's systemctl commands drive — a marker file. The current PID, when PIDFile
// is set, is written there for those commands.
type Unit struct {
	*Proc
	// File is the installed unit file; empty, the process's command line is fixed.
	File string
	// StoppedFile, when set, holds the stopped state: the unit is stopped while it exists.
	StoppedFile string
	// PIDFile, when set, holds the running process's PID (empty while none runs).
	PIDFile string

	mu           sync.Mutex // guards stopped and restartAfter
	stopped      bool       // when StoppedFile is empty
	restartAfter time.Duration
}

// newUnit is the unit installed at file, its process logging as name.
func newUnit(name, logDir, file string, env ...string) *Unit {
	return &Unit{Proc: newProc(name, logDir, "", nil, env...), File: file}
}

// fixedUnit is a unit of the node's own (not one install.sh installs), with a fixed command
// line and restart delay.
func fixedUnit(p *Proc, restartAfter time.Duration) *Unit {
	return &Unit{Proc: p, restartAfter: restartAfter}
}

// load reads the unit file into the process's command line and the restart delay.
func (u *Unit) load() error {
	if u.File == "" {
		return nil
	}
	spec, err := readUnit(u.File)
	if err != nil {
		return err
	}
	u.Proc.SetCommand(spec.Argv[0], spec.Argv[1:])
	u.mu.Lock()
	u.restartAfter = spec.RestartDelay
	u.mu.Unlock()
	return nil
}

// Command is the command line the unit's next start runs, read from its unit file.
func (u *Unit) Command() ([]string, error) {
	spec, err := readUnit(u.File)
	return spec.Argv, err
}

func (u *Unit) restartDelay() time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.restartAfter
}

// supervise runs the unit's supervisor until ctx ends, leaving the process as it is then.
func (u *Unit) supervise(ctx context.Context, logf func(string, ...any)) {
	var exitedAt time.Time
	wasRunning := false
	for {
		running := u.Running()
		if wasRunning && !running {
			exitedAt = time.Now()
			u.writePID(0)
			logf("%s exited", u.Name)
		}
		if !running && !u.Stopped() && time.Since(exitedAt) >= u.restartDelay() {
			if err := u.load(); err != nil {
				logf("%s: %v", u.Name, err)
			} else if err := u.Proc.Start(); err != nil {
				logf("starting %s: %v", u.Name, err)
			} else {
				running = true
				u.writePID(u.Pid())
			}
		}
		wasRunning = running
		select {
		case <-ctx.Done():
			return
		case <-time.After(pollInterval):
		}
	}
}

func (u *Unit) writePID(pid int) {
	if u.PIDFile == "" {
		return
	}
	s := ""
	if pid > 0 {
		s = strconv.Itoa(pid)
	}
	_ = os.WriteFile(u.PIDFile, []byte(s), 0o644)
}

// Stopped reports whether the unit is stopped: the supervisor does not (re)start it.
func (u *Unit) Stopped() bool {
	if u.StoppedFile != "" {
		_, err := os.Stat(u.StoppedFile)
		return err == nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stopped
}

// SetStopped marks the unit stopped or not without touching the process (like systemctl
// stop without the signal, or systemctl start of a running unit).
func (u *Unit) SetStopped(stopped bool) error {
	if u.StoppedFile != "" {
		if stopped {
			return os.WriteFile(u.StoppedFile, nil, 0o644)
		}
		if err := os.Remove(u.StoppedFile); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.stopped = stopped
	return nil
}

// StopUnit is systemctl stop: stopped, then SIGTERM (SIGKILL after grace).
func (u *Unit) StopUnit(grace time.Duration) error {
	if err := u.SetStopped(true); err != nil {
		return err
	}
	return u.Stop(grace)
}

// StartUnit is systemctl start: the supervisor starts the process within its next poll.
func (u *Unit) StartUnit() error { return u.SetStopped(false) }
