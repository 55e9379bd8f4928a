package shim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentcube/sandboxpool/schema/corpus"
	"github.com/agentcube/sandboxpool/shim/manager"
	"github.com/agentcube/sandboxpool/tests/shim/containerdtest"
)

// FiguresEnv turns TestShimFigures on; it measures, it does not judge.
const FiguresEnv = "SANDBOXPOOL_SHIM_FIGURES"

// figurePods is how many pods (and ctr tasks) each figure is taken over.
const figurePods = 50

// TestShimFigures measures the figures of docs/benchmarks-log.md ("Placeholder shim"): ctr run
// to RUNNING, CRI RunPodSandbox+CreateContainer+StartContainer, and the shim's memory per
// pod with 50 pods, beside runc's shim for the same pause pod when runc is installed. It
// prints a table and writes it to _output/shim-figures.md. Nothing is asserted about time.
//
//	make containerd && SANDBOXPOOL_CONTAINERD=$(ls -d .tools/containerd*) \
//	  SANDBOXPOOL_SHIM_FIGURES=1 go test -count=1 -run TestShimFigures -v -timeout 30m ./tests/shim/
func TestShimFigures(t *testing.T) {
	if os.Getenv(FiguresEnv) == "" {
		t.Skip(FiguresEnv + " is not set: the figures are taken on request, see docs/benchmarks-log.md")
	}
	e := setUp(t)
	rt, _ := e.ctd.CRI(t)
	ctx := t.Context()
	var report strings.Builder
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&report, "%s, %d pods each, containerd v2.4.2, load average at start %s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), figurePods, strings.Join(strings.Fields(string(load))[:3], " "))

	// ctr run -d → RUNNING (the command returns once the task started).
	var ctrRun []time.Duration
	for i := range figurePods {
		id := fmt.Sprintf("fig%d", i)
		start := time.Now()
		e.run(t, runtimePlaceholder, id)
		ctrRun = append(ctrRun, time.Since(start))
	}
	for i := range figurePods {
		id := fmt.Sprintf("fig%d", i)
		e.ctr(t, "task", "kill", id)
		e.ctr(t, "task", "delete", id)
		e.ctr(t, "container", "rm", id)
	}
	e.noShimsLeft(t)

	// CRI: the three calls kubelet makes to bring a placeholder pod up.
	logDir := filepath.Join(e.ctd.Dir, "pods")
	var phases strings.Builder
	fmt.Fprintf(&phases, "\n| CRI call, p50 | RunPodSandbox | CreateContainer | StartContainer |\n|---|---|---|---|\n")
	criRun := func(handler string) []time.Duration {
		var total []time.Duration
		var calls [3][]time.Duration
		for i := range figurePods {
			_, took, err := criPod(ctx, rt, handler, i, logDir)
			if err != nil {
				t.Fatalf("pod %d with handler %s: %v", i, handler, err)
			}
			total = append(total, took[0]+took[1]+took[2])
			for c := range took {
				calls[c] = append(calls[c], took[c])
			}
		}
		fmt.Fprintf(&phases, "| %s |", handler)
		for c := range calls {
			p50, _, _ := percentiles(calls[c])
			fmt.Fprintf(&phases, " %s |", ms(p50))
		}
		phases.WriteString("\n")
		return total
	}
	placeholderCRI := criRun(handlerPlaceholder)
	placeholderMem := e.memory(t, manager.BinaryName)

	fmt.Fprintf(&report, "| figure | p50 | p99 (= max of %d) | mean |\n|---|---|---|---|\n", figurePods)
	row := func(name string, d []time.Duration) {
		p50, p99, mean := percentiles(d)
		fmt.Fprintf(&report, "| %s | %s | %s | %s |\n", name, ms(p50), ms(p99), ms(mean))
	}
	row("`ctr run -d` → RUNNING, placeholder", ctrRun)
	row("CRI runp + create + start, placeholder (host network)", placeholderCRI)

	var runcMem memoryFigure
	runcNote := ""
	if _, err := exec.LookPath("runc"); err != nil {
		runcNote = "runc is not installed (apt-get install runc): no runc figures"
	} else {
		removePods(t, rt)
		runcCRI := criRun("runc")
		row("CRI runp + create + start, runc (host network), same pause image", runcCRI)
		runcMem = e.memory(t, "containerd-shim-runc-v2")
		runcMem.pause = e.pauseMemory(t)
	}

	report.WriteString(phases.String())
	fmt.Fprintf(&report, "\n| memory with %d pods running | shims | RSS per shim (median) | PSS per pod | RSS per pod |\n|---|---|---|---|---|\n", figurePods)
	fmt.Fprintf(&report, "| placeholder shim | %d | %s | %s | %s |\n", placeholderMem.shims, mib(placeholderMem.medianRSS), mib(placeholderMem.pss/figurePods), mib(placeholderMem.rss/figurePods))
	if runcNote == "" {
		fmt.Fprintf(&report, "| runc shim | %d | %s | %s | %s |\n", runcMem.shims, mib(runcMem.medianRSS), mib(runcMem.pss/figurePods), mib(runcMem.rss/figurePods))
		fmt.Fprintf(&report, "| runc pod's pause processes (2 per pod) | | | %s | %s |\n", mib(runcMem.pause.PSS/figurePods), mib(runcMem.pause.RSS/figurePods))
	} else {
		fmt.Fprintf(&report, "\n%s\n", runcNote)
	}
	t.Logf("\n%s", report.String())

	if root, err := corpus.RepoRoot(); err == nil {
		out := filepath.Join(root, "_output")
		if err := os.MkdirAll(out, 0o755); err == nil {
			if err := os.WriteFile(filepath.Join(out, "shim-figures.md"), []byte(report.String()), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	removePods(t, rt)
}

type memoryFigure struct {
	shims     int
	rss, pss  uint64 // sums over the shims
	medianRSS uint64
	pause     containerdtest.Memory // runc only: the pods' processes
}

// memory sums the memory of the shims of binary.
func (e *env) memory(t *testing.T, binary string) memoryFigure {
	t.Helper()
	var f memoryFigure
	var rss []uint64
	for pid, s := range e.ctd.ShimPIDs() {
		if s.Binary != binary {
			continue
		}
		m, err := containerdtest.MemoryOf(pid)
		if err != nil {
			t.Fatal(err)
		}
		f.shims++
		f.rss += m.RSS
		f.pss += m.PSS
		rss = append(rss, m.RSS)
	}
	if f.shims == 0 {
		t.Fatalf("no %s processes", binary)
	}
	slices.Sort(rss)
	f.medianRSS = rss[len(rss)/2]
	return f
}

// pauseMemory sums the memory of the processes the runc shims run (each pod's pause).
func (e *env) pauseMemory(t *testing.T) containerdtest.Memory {
	t.Helper()
	shims := e.ctd.ShimPIDs()
	var sum containerdtest.Memory
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		var pid, ppid int
		if _, err := fmt.Sscan(d.Name(), &pid); err != nil || len(f) < 2 {
			continue
		}
		if _, err := fmt.Sscan(f[1], &ppid); err != nil || shims[ppid].Binary != "containerd-shim-runc-v2" {
			continue
		}
		if m, err := containerdtest.MemoryOf(pid); err == nil {
			sum.RSS += m.RSS
			sum.PSS += m.PSS
		}
	}
	return sum
}

// percentiles returns p50, p99 (nearest rank) and the mean.
func percentiles(d []time.Duration) (p50, p99, mean time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	rank := func(p float64) time.Duration {
		i := int(float64(len(s))*p+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.99), sum / time.Duration(len(s))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
