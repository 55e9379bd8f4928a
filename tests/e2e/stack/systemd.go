package stack

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The stack has no systemd: its supervisor plays the node's units (Unit). It reads what
// systemd reads from an installed unit file — ExecStart with its EnvironmentFile variables,
// RestartSec — each time it starts the unit, as systemd does, so the commands that run are
// the installed units' own.

// unitSpec is what the supervisor takes from a unit file.
type unitSpec struct {
	Argv         []string
	RestartDelay time.Duration
}

var (
	wholeVar = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)
	braceVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

// readUnit reads the unit file at path and the environment files it names, and expands
// ExecStart as systemd does (systemd.service(5), "Command lines"): "${NAME}" is replaced by
// the variable's value within a word, and a word that is exactly "$NAME" becomes the
// value's whitespace-separated words (none when it is empty). Quoting, specifiers and
// ExecStart prefixes are not supported: the units of deploy/node use none.
func readUnit(path string) (unitSpec, error) {
	spec := unitSpec{RestartDelay: 100 * time.Millisecond} // systemd's default RestartSec
	keys, err := serviceKeys(path)
	if err != nil {
		return spec, err
	}
	env := map[string]string{}
	for _, f := range keys["EnvironmentFile"] {
		optional := strings.HasPrefix(f, "-")
		vars, err := readEnvFile(strings.TrimPrefix(f, "-"))
		if err != nil && !(optional && os.IsNotExist(err)) {
			return spec, fmt.Errorf("%s: EnvironmentFile: %w", path, err)
		}
		maps.Copy(env, vars)
	}
	if v := keys["RestartSec"]; len(v) > 0 {
		d, err := parseSeconds(v[len(v)-1])
		if err != nil {
			return spec, fmt.Errorf("%s: RestartSec: %w", path, err)
		}
		spec.RestartDelay = d
	}
	exec := keys["ExecStart"]
	if len(exec) != 1 {
		return spec, fmt.Errorf("%s: want one ExecStart, have %d", path, len(exec))
	}
	if exec[0] == "" || strings.ContainsAny(exec[0], `"'%`) || strings.ContainsAny(exec[0][:1], "-@+!:|") {
		return spec, fmt.Errorf("%s: ExecStart uses quoting, specifiers or prefixes, which the stack does not read: %s", path, exec[0])
	}
	for w := range strings.FieldsSeq(exec[0]) {
		if m := wholeVar.FindStringSubmatch(w); m != nil {
			spec.Argv = append(spec.Argv, strings.Fields(env[m[1]])...)
			continue
		}
		spec.Argv = append(spec.Argv, braceVar.ReplaceAllStringFunc(w, func(v string) string {
			return env[braceVar.FindStringSubmatch(v)[1]]
		}))
	}
	if len(spec.Argv) == 0 || !strings.HasPrefix(spec.Argv[0], "/") {
		return spec, fmt.Errorf("%s: ExecStart must start with an absolute path: %q", path, exec[0])
	}
	return spec, nil
}

// serviceKeys returns the [Service] section's settings of a unit file, each key's values in
// order, continuation lines joined.
func serviceKeys(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]string{}
	section, pending := "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if section != "[Service]" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s: not a setting: %q", path, line)
		}
		out[strings.TrimSpace(k)] = append(out[strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	return out, sc.Err()
}

// readEnvFile reads KEY=VALUE lines (systemd's EnvironmentFile; a value may be quoted).
func readEnvFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for l := range strings.SplitSeq(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("%s: not KEY=VALUE: %q", path, l)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[strings.TrimSpace(k)] = v
	}
	return out, nil
}

// parseSeconds reads a systemd time span: a Go duration ("1s", "500ms") or plain seconds.
func parseSeconds(s string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}
