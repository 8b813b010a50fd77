// Command image packs a static shardsched binary into an OCI image layout
// on disk, with no registry, daemon or root: one layer holding only the
// binary (no shell, no package manager, nothing to patch), a non-root
// user, and the OCI labels. Every input that could vary is fixed (file
// times, owners, the creation time from -created), so the same binary gives
// the same digest on any machine. `make image` builds the binary and runs
// this; `skopeo copy oci:DIR:TAG docker://REGISTRY/shardsched:TAG` pushes it.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the shard runs as: not root, the same number distroless's
// "nonroot" has, so PodSecurity "restricted" (runAsNonRoot) admits it.
const nonRoot = 65532

type options struct {
	binary, out, tag, version, revision, source, created, arch string
}

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "", "the static shardsched binary (CGO_ENABLED=0) to pack")
	flag.StringVar(&o.out, "out", "", "OCI image layout directory to write (replaced)")
	flag.StringVar(&o.tag, "tag", "", "the image's tag (org.opencontainers.image.ref.name in the layout's index)")
	flag.StringVar(&o.version, "version", "", "org.opencontainers.image.version label")
	flag.StringVar(&o.revision, "revision", "", "org.opencontainers.image.revision label (the commit)")
	flag.StringVar(&o.source, "source", "https://github.com/shardsched/shardsched", "org.opencontainers.image.source label")
	flag.StringVar(&o.created, "created", "1970-01-01T00:00:00Z", "creation time, RFC 3339 (the commit's time, for reproducible builds)")
	flag.StringVar(&o.arch, "arch", "amd64", "the binary's architecture")
	flag.Parse()
	digest, err := build(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s:%s\n", digest, o.out, o.tag)
}

func build(o options) (v1.Hash, error) {
	switch {
	case o.binary == "" || o.out == "" || o.tag == "":
		return v1.Hash{}, errors.New("-binary, -out and -tag are required")
	}
	created, err := time.Parse(time.RFC3339, o.created)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("-created %q: %w", o.created, err)
	}
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return v1.Hash{}, err
	}
	layerTar, err := rootfs(bin)
	if err != nil {
		return v1.Hash{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: created}, CreatedBy: "hack/tools/image: the static shardsched binary", Comment: "no shell, no package manager",
	}})
	if err != nil {
		return v1.Hash{}, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.arch, v1.Time{Time: created}
	user := fmt.Sprintf("%d:%d", nonRoot, nonRoot)
	cf.Config = v1.Config{
		Entrypoint: []string{"/shardsched"},
		User:       user,
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":    "shardsched",
			"org.opencontainers.image.version":  o.version,
			"org.opencontainers.image.revision": o.revision,
			"org.opencontainers.image.source":   o.source,
			"org.opencontainers.image.created":  created.UTC().Format(time.RFC3339),
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(o.out); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.tag})); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// rootfs is the image's only layer: /shardsched, and /tmp for the
// libraries that want a writable temporary directory. Owners and times are
// fixed so the bytes depend on the binary alone.
func rootfs(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	entries := []struct {
		hdr  tar.Header
		body []byte
	}{
		{tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}, nil},
		{tar.Header{Typeflag: tar.TypeReg, Name: "shardsched", Mode: 0o755, Size: int64(len(bin)), ModTime: epoch}, bin},
	}
	for _, e := range entries {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
