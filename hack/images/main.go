// Command images builds the controller's and the webhook's OCI images (`make images`) and
// pushes them (`make push`); see hack/images/oci and docs/operator-guide.md.
//
//	images build --out DIR --repo REPO --version VERSION [--arch GOARCH]
//	images push  --registry REGISTRY [--insecure] [--dir DIR | ARCHIVE...]
//
// build prints one line per image: reference, manifest digest, archive. push pushes the
// archives build wrote to DIR, or the archives given. Every time stamp is
// $SOURCE_DATE_EPOCH when set (https://reproducible-builds.org/specs/source-date-epoch/),
// else the Unix epoch.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/agentcube/sandboxpool/hack/images/oci"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: images build|push [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "build":
		err = build(ctx, args)
	case "push":
		err = push(ctx, args)
	default:
		err = fmt.Errorf("unknown command %q: want build or push", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, args []string) error {
	o := oci.DefaultOptions()
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	fs.StringVar(&o.Out, "out", o.Out, "directory the archives are written to")
	fs.StringVar(&o.Repo, "repo", o.Repo, "repository prefix of the image references")
	fs.StringVar(&o.Version, "version", o.Version, "image tag and the binaries' version string")
	fs.StringVar(&o.Arch, "arch", o.Arch, "GOARCH to build for")
	_ = fs.Parse(args)
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		s, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since the Unix epoch: %w", epoch, err)
		}
		o.Created = time.Unix(s, 0).UTC()
	}
	results, err := oci.Build(ctx, o)
	if err != nil {
		return err
	}
	for _, r := range results {
		fmt.Printf("%s  %s  %s\n", r.Ref, r.Digest, r.Archive)
	}
	return nil
}

func push(ctx context.Context, args []string) error {
	var o oci.PushOptions
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	fs.StringVar(&o.Registry, "registry", "", "repository prefix to push to, e.g. registry.example.com/team")
	fs.BoolVar(&o.Insecure, "insecure", false, "plain HTTP to the registry")
	dir := fs.String("dir", oci.DefaultOptions().Out, "directory of the archives build wrote (when no archives are given)")
	_ = fs.Parse(args)
	archives := fs.Args()
	if len(archives) == 0 {
		for _, s := range oci.Images {
			archives = append(archives, oci.ArchivePath(*dir, s.Name))
		}
	}
	for _, archive := range archives {
		p, err := oci.Push(ctx, archive, o)
		if err != nil {
			return err
		}
		fmt.Printf("%s  %s\n", p.Ref, p.Digest)
	}
	return nil
}
