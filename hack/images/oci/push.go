package oci

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PushOptions configure Push.
type PushOptions struct {
	// Registry is the repository prefix pushed to, e.g. registry.example.com/team: an
	// archive named <anything>/<name>:<tag> is pushed as Registry/<name>:<tag>.
	Registry string
	// Insecure talks plain HTTP to the registry (a local registry without TLS).
	// localhost and 127.0.0.1 are plain HTTP regardless.
	Insecure bool
	// Keychain finds the registry's credentials; authn.DefaultKeychain (the Docker config,
	// ~/.docker/config.json or $DOCKER_CONFIG, as `docker login` writes it) when nil.
	Keychain authn.Keychain
}

// Pushed is one pushed image.
type Pushed struct {
	// Ref is the reference it was pushed as; Digest its manifest digest, the same as the
	// archive's (the blobs go as they are).
	Ref    string
	Digest v1.Hash
}

// Push pushes the image of the archive at path (WriteArchive's format) to o.Registry.
func Push(ctx context.Context, path string, o PushOptions) (Pushed, error) {
	if o.Registry == "" || strings.HasSuffix(o.Registry, "/") {
		return Pushed{}, fmt.Errorf("registry %q: want a repository prefix such as registry.example.com/team", o.Registry)
	}
	img, ref, cleanup, err := ReadArchive(path)
	if err != nil {
		return Pushed{}, err
	}
	defer cleanup()
	src, err := name.NewTag(ref)
	if err != nil {
		return Pushed{}, fmt.Errorf("archive %s: image name %q: %w", path, ref, err)
	}
	repo := src.RepositoryStr()
	target := o.Registry + "/" + repo[strings.LastIndex(repo, "/")+1:] + ":" + src.TagStr()
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	dst, err := name.NewTag(target, nameOpts...)
	if err != nil {
		return Pushed{}, fmt.Errorf("registry %q: target %q: %w", o.Registry, target, err)
	}
	keychain := o.Keychain
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	if err := remote.Write(dst, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain)); err != nil {
		return Pushed{}, fmt.Errorf("pushing %s as %s: %w", path, dst, err)
	}
	d, err := img.Digest()
	if err != nil {
		return Pushed{}, err
	}
	return Pushed{Ref: dst.String(), Digest: d}, nil
}
