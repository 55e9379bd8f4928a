package framework

import (
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// APIServerPID is the process id of this control plane's kube-apiserver (for /proc usage).
func (c *ControlPlane) APIServerPID() (int, error) {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return 0, err
	}
	pid, _, err := findProcess("kube-apiserver", "--secure-port="+u.Port())
	return pid, err
}

// EtcdPID is the process id of this control plane's etcd.
func (c *ControlPlane) EtcdPID() (int, error) {
	return processWithArgContaining("etcd", c.Env.ControlPlane.Etcd.URL.Host)
}

// processWithArgContaining finds the process whose executable's base name is name and one
// of whose arguments contains s.
func processWithArgContaining(name, s string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(argv[0]) != name {
			continue
		}
		for _, a := range argv[1:] {
			if strings.Contains(a, s) {
				return pid, nil
			}
		}
	}
	return 0, os.ErrNotExist
}
