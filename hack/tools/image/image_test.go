package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestImageIsReproducibleAndRuns builds the real shard binary as `make
// image` does, packs it twice, and checks what a cluster would run: the same
// digest both times, a non-root user, the binary as entrypoint, nothing
// else in the image (no shell), and the binary taken back out of the image
// answering --version.
func TestImageIsReproducibleAndRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the shard binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "shardsched")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/shardsched")
	build.Dir = filepath.Join("..", "..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shardsched: %v\n%s", err, out)
	}
	o := options{binary: bin, tag: "0.0.0-test", version: "0.0.0-test", revision: "abc", created: "2026-11-23T10:00:00Z", arch: "amd64"}
	o.out = filepath.Join(dir, "a")
	d1, err := build1(t, o)
	if err != nil {
		t.Fatal(err)
	}
	o.out = filepath.Join(dir, "b")
	d2, err := build1(t, o)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Fatalf("two builds of one binary: digests %s and %s", d1, d2)
	}
	t.Logf("image digest %s", d1)

	// Read it back with the layout reader, as skopeo would.
	idx, err := layout.ImageIndexFromPath(o.out)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "0.0.0-test" {
		t.Fatalf("index: %+v, want one image tagged 0.0.0-test", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || cf.Config.User != "65532:65532" ||
		len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/shardsched" || len(cf.Config.Cmd) != 0 {
		t.Errorf("config: os %s arch %s user %q entrypoint %v cmd %v", cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if cf.Config.Labels["org.opencontainers.image.revision"] != "abc" || cf.Config.Labels["org.opencontainers.image.version"] != "0.0.0-test" {
		t.Errorf("labels: %v", cf.Config.Labels)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (err %v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	var extracted []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "shardsched" {
			if extracted, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if strings.Join(names, " ") != "tmp/ shardsched" {
		t.Errorf("the layer holds %v; want only tmp/ and the binary (no shell)", names)
	}
	run := filepath.Join(dir, "from-image")
	if err := os.WriteFile(run, extracted, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(run, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "shardsched ") {
		t.Fatalf("the binary from the image, --version: %v: %q", err, out)
	}
	t.Logf("from the image: %s", bytes.TrimSpace(out))
}

func build1(t *testing.T, o options) (string, error) {
	t.Helper()
	h, err := build(o)
	return h.String(), err
}
