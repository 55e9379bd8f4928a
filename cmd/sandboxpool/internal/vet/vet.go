// Package vet implements `sandboxpool vet`: it turns YAML files into admission requests and
// checks them as the cluster would, offline: first the CUE schema, which stands in for the
// API server's check of the CRDs generated from it (validation, defaults, immutable fields),
// then the webhook's own decision (the embedded Rego policy), so a user's CI rejects what
// the cluster would.
package vet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/bundle"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/agentcube/sandboxpool/policy"
	"github.com/agentcube/sandboxpool/schema"
	"github.com/agentcube/sandboxpool/schema/v1alpha1"
	"github.com/agentcube/sandboxpool/webhook"
)

// Exit codes.
const (
	ExitOK        = 0
	ExitViolation = 1
	ExitUsage     = 2
)

// object is one YAML document of an input file.
type object struct {
	file string
	json []byte
	meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
}

func (o object) id() string { return o.meta.Kind + "/" + o.meta.Metadata.Name }

// Run runs `sandboxpool vet` with args (without the command name) and returns the exit code:
// 0 when every object passes, 1 when any violates a rule, 2 on bad usage or unreadable input.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandboxpool vet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	old := fs.String("old", "", "YAML file with the current objects: each input object with the same kind and name is checked as an UPDATE of it (immutable fields, who may change what)")
	subresource := fs.String("subresource", "", `check UPDATEs of this subresource ("status"); needs --old`)
	user := fs.String("as", "sandboxpool-vet", "user name the requests are made as (matters for status updates)")
	var groups stringList
	fs.Var(&groups, "as-group", "group of the user; repeat for more")
	bundle := fs.String("policy-bundle", "", "Rego bundle directory or .tar.gz to use instead of the embedded one")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sandboxpool vet [flags] FILE...\n\nChecks each object in the YAML files (multi-document files are fine) with the CUE\nschema and the Rego admission policy; prints every violation with its field path.\nExit status: 0 all pass, 1 a violation, 2 usage or input error.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return ExitUsage
	}
	if *subresource != "" && *old == "" {
		fmt.Fprintln(stderr, "sandboxpool vet: --subresource needs --old")
		return ExitUsage
	}
	check, err := newChecker(ctx, *bundle)
	if err != nil {
		fmt.Fprintln(stderr, "sandboxpool vet:", err)
		return ExitUsage
	}
	olds := map[string]object{}
	if *old != "" {
		objs, err := readFile(*old)
		if err != nil {
			fmt.Fprintln(stderr, "sandboxpool vet:", err)
			return ExitUsage
		}
		for _, o := range objs {
			olds[o.id()] = o
		}
	}
	userInfo := authenticationv1.UserInfo{Username: *user, Groups: groups}
	code := ExitOK
	for _, file := range fs.Args() {
		objs, err := readFile(file)
		if err != nil {
			fmt.Fprintln(stderr, "sandboxpool vet:", err)
			return ExitUsage
		}
		for _, o := range objs {
			req := request(o, olds, *subresource, userInfo)
			d, err := check.decide(ctx, req)
			switch {
			case err != nil:
				fmt.Fprintf(stdout, "%s: %s: error: %v\n", file, o.id(), err)
				code = ExitViolation
			case !d.Allowed:
				for _, v := range d.Violations {
					fmt.Fprintf(stdout, "%s: %s: %s\n", file, o.id(), formatViolation(v))
				}
				code = ExitViolation
			default:
				fmt.Fprintf(stdout, "%s: %s: ok\n", file, o.id())
			}
		}
	}
	return code
}

// checker decides requests as the API server and the webhook would together.
type checker struct {
	schema  *schema.Schema
	webhook *webhook.Validator
}

func newChecker(ctx context.Context, bundlePath string) (*checker, error) {
	s, err := schema.Compiled()
	if err != nil {
		return nil, err
	}
	var b *bundle.Bundle
	if bundlePath != "" {
		b, err = policy.LoadBundle(bundlePath)
	} else {
		b, err = policy.LoadEmbedded()
	}
	if err != nil {
		return nil, fmt.Errorf("loading the policy: %w", err)
	}
	engine, err := policy.New(ctx, policy.WithBundle(b))
	if err != nil {
		return nil, fmt.Errorf("preparing the policy: %w", err)
	}
	return &checker{schema: s, webhook: webhook.NewValidator(engine)}, nil
}

// decide checks req's object against the CUE schema and, on an UPDATE, its immutable fields,
// where the API server checks the CRD; then the webhook decides the request with the objects
// defaulted, as the API server sends them. The API server ratchets its checks on an UPDATE
// (a value the old object already had passes); vet checks the new object whole.
func (c *checker) decide(ctx context.Context, req *admissionv1.AdmissionRequest) (policy.Decision, error) {
	kind := schema.Kind(req.Kind.Kind)
	if !slices.Contains(schema.Kinds, kind) {
		return c.webhook.Validate(ctx, req) // not the API's kind: the webhook's error says so
	}
	obj, err := c.schema.Default(kind, req.Object.Raw)
	if err == nil && req.Operation == admissionv1.Update {
		err = c.schema.ValidateTransition(kind, req.OldObject.Raw, req.Object.Raw)
	}
	if ve, ok := errors.AsType[*schema.ValidationError](err); ok {
		return schemaDenial(ve), nil
	}
	if err != nil {
		return policy.Decision{}, fmt.Errorf("checking %s %s against the schema: %w", kind, req.Name, err)
	}
	sub := *req
	sub.Object = runtime.RawExtension{Raw: obj}
	if req.Operation == admissionv1.Update {
		if old, err := c.schema.Default(kind, req.OldObject.Raw); err == nil {
			sub.OldObject = runtime.RawExtension{Raw: old} // else stored under older rules: as it is
		}
	}
	return c.webhook.Validate(ctx, &sub)
}

// schemaDenial turns the schema's field errors into violations whose messages start with
// the field, as the policy's do.
func schemaDenial(ve *schema.ValidationError) policy.Decision {
	d := policy.Decision{Violations: make([]policy.Violation, 0, len(ve.Fields))}
	for _, f := range ve.Fields {
		d.Violations = append(d.Violations, policy.Violation{Field: f.Path, Msg: f.String()})
	}
	if len(d.Violations) == 0 {
		d.Violations = append(d.Violations, policy.Violation{Msg: ve.Error()})
	}
	return d
}

// formatViolation prints "field: message" without repeating a field the message already
// starts with.
func formatViolation(v policy.Violation) string {
	if v.Field == "" || strings.HasPrefix(v.Msg, v.Field+":") {
		return v.Msg
	}
	return v.Field + ": " + v.Msg
}

func request(o object, olds map[string]object, subresource string, user authenticationv1.UserInfo) *admissionv1.AdmissionRequest {
	req := &admissionv1.AdmissionRequest{
		UID:         "sandboxpool-vet",
		Kind:        metav1.GroupVersionKind{Group: v1alpha1.GroupName, Version: v1alpha1.Version, Kind: o.meta.Kind},
		Name:        o.meta.Metadata.Name,
		Operation:   admissionv1.Create,
		UserInfo:    user,
		Object:      runtime.RawExtension{Raw: o.json},
		SubResource: subresource,
	}
	if gv := strings.SplitN(o.meta.APIVersion, "/", 2); len(gv) == 2 {
		req.Kind.Group, req.Kind.Version = gv[0], gv[1]
	}
	resource := v1alpha1.ResourceSandboxPools
	if o.meta.Kind == v1alpha1.KindSandboxPoolClass {
		resource = v1alpha1.ResourceSandboxPoolClasses
	}
	req.Resource = metav1.GroupVersionResource{Group: req.Kind.Group, Version: req.Kind.Version, Resource: resource}
	if prev, ok := olds[o.id()]; ok {
		req.Operation = admissionv1.Update
		req.OldObject = runtime.RawExtension{Raw: prev.json}
	} else {
		req.SubResource = ""
	}
	return req
}

// readFile splits a YAML (or JSON) file into its objects.
func readFile(name string) ([]object, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		o := object{file: name, json: j}
		if err := yaml.Unmarshal(j, &o.meta); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no objects", name)
	}
	return out, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for line := range bytes.SplitSeq(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
