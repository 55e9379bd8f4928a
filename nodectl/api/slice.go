package api

import (
	"fmt"
	"path"
	"strings"
)

// Where the slice lives (docs/node-ctl-contract.md, "Delivery"). The pool's sandboxes run in
// one cgroup, the slice, which must be a direct child of kubelet's pod root — the cgroup
// kubelet weighs by the node's allocatable cpu and limits to its allocatable memory, and
// below which it creates every pod's cgroup. There the slice weighs against the pods exactly
// as a Guaranteed pod of the pool's size does, and its memory is inside the node's
// allocatable, where the scheduler already counts it (as the placeholder pods' requests,
// which run no process and so take none of the weight). Beside the pod root the pool's cpu
// and memory would be counted twice: once inside it, idle, and once beside it.
const (
	// PodRootCgroupfs is the name of kubelet's pod root below its cgroupRoot under the
	// cgroupfs driver (kubelet's defaults make it /kubepods).
	PodRootCgroupfs = "kubepods"
	// PodRootSystemd is its name under the systemd driver (/kubepods.slice).
	PodRootSystemd = "kubepods.slice"
	// podCgroupMarker is what makes kubelet take a child of its pod root for a pod's cgroup:
	// kubelet removes such a cgroup, killing every process in it, when no pod of that UID
	// runs (pkg/kubelet/cm, GetAllPodsFromCgroups and the orphaned pod cgroup clean-up).
	podCgroupMarker = "pod"
)

// CheckSlicePath checks that p (absolute, relative to the cgroup root) can hold the slice.
// It refuses a name kubelet would take for a pod cgroup, whose processes kubelet kills. The
// warning, when not empty, says that p is not a child of a kubelet pod root: a node-ctl may
// still run there (a test, a node without kubelet), but the pool is then not delivered as
// the contract promises.
func CheckSlicePath(p string) (warning string, err error) {
	name := path.Base(p)
	if strings.Contains(name, podCgroupMarker) {
		return "", fmt.Errorf("cgroup path %q: the name %q contains %q, so kubelet would take the slice for an orphaned pod cgroup and kill its sandboxes; choose a name without it (default %q)",
			p, name, podCgroupMarker, path.Base(DefaultCgroupPath))
	}
	switch path.Base(path.Dir(p)) {
	case PodRootCgroupfs, PodRootSystemd:
		return "", nil
	}
	return fmt.Sprintf("cgroup path %q is not a child of kubelet's pod root (%s or %s): the pool's cpu and memory are counted twice, once in the pod root as the placeholder's requests and once beside it, and the sandboxes get less than the pool under load",
		p, PodRootCgroupfs, PodRootSystemd), nil
}
