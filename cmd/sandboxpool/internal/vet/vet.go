// Package vet implements `sandboxpool vet`: it turns YAML files into admission requests and
// runs them through the webhook's own pipeline (CUE schema, then the embedded Rego policy),
// so a user's CI rejects exactly what the cluster would.
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
	old := fs.String("old", "", "YAML file with the current objects: each input object with the same kind and name is checked as an UPDATE of it (immutable fields, ratcheting)")
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
	validator, err := newValidator(ctx, *bundle)
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
			d, err := validator.Validate(ctx, req)
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

func newValidator(ctx context.Context, bundlePath string) (*webhook.Validator, error) {
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
	return webhook.NewValidator(s, engine), nil
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
