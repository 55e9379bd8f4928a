package policy

import (
	"cmp"
	"slices"
	"strings"
)

// Decision is the policy's answer to one admission request.
type Decision struct {
	// Allowed is true when the request breaks no rule.
	Allowed bool
	// Violations lists every rule broken, sorted by field, then message.
	Violations []Violation
}

// Violation is one broken rule.
type Violation struct {
	// Field is the dotted path of the offending field, e.g. spec.nodeName or status.phase.
	Field string `json:"field"`
	// Msg is the human-readable reason; it names the field (and, for status scoping, the
	// caller and the pool).
	Msg string `json:"msg"`
}

// messageSeparator joins the messages of a denied request, Gatekeeper style.
const messageSeparator = "; "

// Message joins the messages of every violation, in order: the reason of a denial.
func (d Decision) Message() string {
	msgs := make([]string, len(d.Violations))
	for i, v := range d.Violations {
		msgs[i] = v.Msg
	}
	return strings.Join(msgs, messageSeparator)
}

func sortViolations(vs []Violation) {
	slices.SortFunc(vs, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Field, b.Field), cmp.Compare(a.Msg, b.Msg))
	})
}
