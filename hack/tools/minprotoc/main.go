// Command minprotoc is the part of protoc the project needs, built from the Go module proxy
// (no protoc binary, no apt package): it compiles .proto files with
// github.com/bufbuild/protocompile and runs protoc plugins (protoc-gen-go,
// protoc-gen-go-ttrpc) on them through the ordinary plugin protocol.
//
//	minprotoc -I DIR --plugin=protoc-gen-NAME=PATH --NAME_out=DIR [--NAME_opt=OPTS] FILE.proto...
//
// Files are named relative to an import path, as with protoc. The well-known types
// (google/protobuf/*.proto) are built in.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/pluginpb"
)

// plugin is one --NAME_out request.
type plugin struct {
	name string // NAME in --NAME_out
	path string // executable; protoc-gen-NAME on PATH unless --plugin names it
	out  string // output directory
	opts []string
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "minprotoc:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var (
		importPaths []string
		files       []string
		plugins     = map[string]*plugin{}
		order       []string
		paths       = map[string]string{}
	)
	get := func(name string) *plugin {
		if p, ok := plugins[name]; ok {
			return p
		}
		p := &plugin{name: name}
		plugins[name] = p
		order = append(order, name)
		return p
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-I" || a == "--proto_path":
			if i+1 == len(args) {
				return fmt.Errorf("%s needs a directory", a)
			}
			i++
			importPaths = append(importPaths, args[i])
		case strings.HasPrefix(a, "-I"):
			importPaths = append(importPaths, strings.TrimPrefix(a, "-I"))
		case strings.HasPrefix(a, "--proto_path="):
			importPaths = append(importPaths, strings.TrimPrefix(a, "--proto_path="))
		case strings.HasPrefix(a, "--plugin="):
			name, path, ok := strings.Cut(strings.TrimPrefix(a, "--plugin="), "=")
			if !ok || !strings.HasPrefix(name, "protoc-gen-") {
				return fmt.Errorf("--plugin wants protoc-gen-NAME=PATH, got %q", a)
			}
			paths[strings.TrimPrefix(name, "protoc-gen-")] = path
		case strings.HasPrefix(a, "--") && strings.Contains(a, "_out="):
			flag, dir, _ := strings.Cut(a[2:], "=")
			p := get(strings.TrimSuffix(flag, "_out"))
			// protoc also accepts --NAME_out=OPTS:DIR.
			if opts, d, ok := strings.Cut(dir, ":"); ok {
				p.opts, dir = append(p.opts, opts), d
			}
			p.out = dir
		case strings.HasPrefix(a, "--") && strings.Contains(a, "_opt="):
			flag, opts, _ := strings.Cut(a[2:], "=")
			p := get(strings.TrimSuffix(flag, "_opt"))
			p.opts = append(p.opts, opts)
		case strings.HasPrefix(a, "-"):
			return fmt.Errorf("unknown flag %q", a)
		default:
			files = append(files, a)
		}
	}
	if len(files) == 0 {
		return errors.New("no .proto files given")
	}
	if len(order) == 0 {
		return errors.New("no --NAME_out given")
	}
	if len(importPaths) == 0 {
		importPaths = []string{"."}
	}

	req, err := compile(importPaths, files)
	if err != nil {
		return err
	}
	for _, name := range order {
		p := plugins[name]
		if p.out == "" {
			return fmt.Errorf("--%s_opt without --%s_out", name, name)
		}
		p.path = paths[name]
		if p.path == "" {
			p.path = "protoc-gen-" + name
		}
		if err := p.generate(req); err != nil {
			return err
		}
	}
	return nil
}

// compile parses and links files and returns the plugin request for them: every file
// they import, dependencies first, with source info so comments reach the generated code.
func compile(importPaths, files []string) (*pluginpb.CodeGeneratorRequest, error) {
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: importPaths}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	linked, err := c.Compile(context.Background(), files...)
	if err != nil {
		return nil, err
	}
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: files}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		req.ProtoFile = append(req.ProtoFile, protodesc.ToFileDescriptorProto(fd))
		if slices.Contains(files, fd.Path()) {
			req.SourceFileDescriptors = append(req.SourceFileDescriptors, protodesc.ToFileDescriptorProto(fd))
		}
	}
	for _, f := range linked {
		add(f)
	}
	return req, nil
}

// generate runs the plugin on req and writes the files it returns below p.out.
func (p *plugin) generate(req *pluginpb.CodeGeneratorRequest) error {
	r := proto.Clone(req).(*pluginpb.CodeGeneratorRequest)
	if len(p.opts) > 0 {
		r.Parameter = proto.String(strings.Join(p.opts, ","))
	}
	in, err := proto.Marshal(r)
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(p.path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s: %w: %s", p.path, err, strings.TrimSpace(stderr.String()))
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return fmt.Errorf("reading the response of %s: %w", p.path, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("%s: %s", p.path, resp.GetError())
	}
	for _, f := range resp.File {
		if f.GetInsertionPoint() != "" {
			return fmt.Errorf("%s: insertion points are not supported (%s)", p.path, f.GetName())
		}
		path := filepath.Join(p.out, filepath.FromSlash(f.GetName()))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(f.GetContent()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
