package framework

import (
	"net/url"
	"slices"
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
	pid, _, err := scanProcesses(name, func(args []string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, s) })
	})
	return pid, err
}
