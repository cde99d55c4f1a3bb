package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// created is the commit time the tests build with.
var created = time.Unix(1764547200, 0)

// fakeBase writes a small gzipped root filesystem tar.
func fakeBase(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: created}); err != nil {
			t.Fatal(err)
		}
	}
	body := []byte("#!/bin/sh\n")
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "usr/bin/sh", Mode: 0o755, Size: int64(len(body)), ModTime: created}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	p := filepath.Join(t.TempDir(), "base.tar.gz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeBinaries writes binaries with the given mtime and mode, as a build
// on some host leaves them.
func fakeBinaries(t *testing.T, mtime time.Time, mode os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range []string{"route-agent", "gateway", "causewayctl"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte("binary "+n), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testConfig(base, bins string) Config {
	return Config{BaseLayer: base, Binaries: bins, Created: created,
		Source: "https://example.com/causeway", Revision: "0123456789abcdef0123456789abcdef01234567", Version: "v0.1.0"}
}

// Two builds from binaries with different mtimes and modes (a fresh
// `go build` on another machine) give one digest, one layout and one
// tarball, byte for byte.
func TestBuildReproducible(t *testing.T) {
	base := fakeBase(t)
	tags := []name.Tag{name.MustParseReference("ghcr.io/causeway-net/causeway:v0.1.0").(name.Tag),
		name.MustParseReference("ghcr.io/causeway-net/causeway:0123456789ab").(name.Tag)}
	var digests []v1.Hash
	var layouts, tarballs [][]byte
	for i, bins := range []string{
		fakeBinaries(t, time.Now(), 0o775),
		fakeBinaries(t, time.Now().Add(-time.Hour), 0o700),
	} {
		img, err := Build(testConfig(base, bins))
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
		dir := filepath.Join(t.TempDir(), "layout")
		if err := WriteLayout(dir, img, tags); err != nil {
			t.Fatal(err)
		}
		layouts = append(layouts, treeBytes(t, dir))
		tb := filepath.Join(t.TempDir(), "image.tar")
		if err := WriteTarball(tb, img, tags[0]); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(tb)
		if err != nil {
			t.Fatal(err)
		}
		tarballs = append(tarballs, b)
		t.Logf("build %d: %s", i, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds, two digests: %s, %s", digests[0], digests[1])
	}
	if !bytes.Equal(layouts[0], layouts[1]) {
		t.Error("two builds wrote different OCI layouts")
	}
	if !bytes.Equal(tarballs[0], tarballs[1]) {
		t.Error("two builds wrote different tarballs")
	}
}

// treeBytes concatenates the names and contents of every file under dir.
func treeBytes(t *testing.T, dir string) []byte {
	t.Helper()
	var out bytes.Buffer
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out.WriteString(p[len(dir):] + "\n")
		out.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// The binaries' layer holds exactly the binaries, sorted, at BinDir,
// executable, owned by root, with the commit's time; the config has the
// labels, PATH and the commit's time; layout and tarball read back to
// the same image.
func TestBuildContents(t *testing.T) {
	base := fakeBase(t)
	img, err := Build(testConfig(base, fakeBinaries(t, time.Now(), 0o700)))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want base + binaries", len(layers))
	}
	rc, err := layers[1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Typeflag != tar.TypeReg || h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(created) {
			t.Errorf("%s: type %c mode %o owner %d:%d (%q:%q) mtime %s; want a regular file 0755 0:0 at %s",
				h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, created)
		}
		b, _ := io.ReadAll(tr)
		if want := "binary " + filepath.Base(h.Name); string(b) != want {
			t.Errorf("%s holds %q, want %q", h.Name, b, want)
		}
	}
	if want := []string{"usr/local/bin/causewayctl", "usr/local/bin/gateway", "usr/local/bin/route-agent"}; !slices.Equal(names, want) {
		t.Errorf("binaries layer has %v, want %v", names, want)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !cf.Created.Equal(created) || cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("config: created %s, %s/%s", cf.Created, cf.OS, cf.Architecture)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://example.com/causeway",
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.version":  "v0.1.0",
	} {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if !slices.Contains(cf.Config.Env, "PATH="+Path) {
		t.Errorf("env %v lacks PATH=%s", cf.Config.Env, Path)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(created) {
			t.Errorf("history %q created %s, want %s", h.CreatedBy, h.Created, created)
		}
	}

	want, _ := img.Digest()
	tag := name.MustParseReference(Repository + ":v0.1.0").(name.Tag)
	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(dir, img, []name.Tag{tag}); err != nil {
		t.Fatal(err)
	}
	fromLayout, err := layoutImage(dir, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := fromLayout.Digest(); d != want {
		t.Errorf("layout holds %s, want %s", d, want)
	}
	tb := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteTarball(tb, img, tag); err != nil {
		t.Fatal(err)
	}
	fromTarball, err := tarball.ImageFromPath(tb, &tag)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := fromTarball.ConfigName(); d != mustConfigName(t, img) {
		t.Errorf("tarball holds config %s, want %s", d, mustConfigName(t, img))
	}
}

func mustConfigName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// layoutImage is the image of the OCI layout dir whose ref.name is tag.
func layoutImage(dir, tag string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == tag {
			return idx.Image(d.Digest)
		}
	}
	return nil, errors.New("no image tagged " + tag + " in " + dir)
}

// The product image has no lab binary; the lab image is the product
// image's layers plus one with the lab's binary, and runs the lab's idle
// client by default (the containerd lab's sandbox image). Two builds from
// binaries of different mtimes and modes give one digest.
func TestBuildLab(t *testing.T) {
	base := fakeBase(t)
	var digests []v1.Hash
	for _, mtime := range []time.Time{time.Now(), time.Now().Add(-time.Hour)} {
		bins := fakeBinaries(t, mtime, 0o700)
		product, err := Build(testConfig(base, bins))
		if err != nil {
			t.Fatal(err)
		}
		lab := filepath.Join(t.TempDir(), LabBinary)
		if err := os.WriteFile(lab, []byte("binary "+LabBinary), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(lab, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		img, err := BuildLab(product, lab, created)
		if err != nil {
			t.Fatal(err)
		}

		productFiles, labFiles := imageFiles(t, product), imageFiles(t, img)
		labPath := "usr/local/bin/" + LabBinary
		if _, ok := productFiles[labPath]; ok {
			t.Errorf("the product image has %s", labPath)
		}
		if got := labFiles[labPath]; got != "binary "+LabBinary {
			t.Errorf("the lab image's %s holds %q", labPath, got)
		}
		for f, content := range productFiles {
			if labFiles[f] != content {
				t.Errorf("the lab image's %s holds %q, the product image's %q", f, labFiles[f], content)
			}
		}
		productCfg, labCfg := mustConfig(t, product), mustConfig(t, img)
		if ids := labCfg.RootFS.DiffIDs; len(ids) != len(productCfg.RootFS.DiffIDs)+1 || !slices.Equal(ids[:len(ids)-1], productCfg.RootFS.DiffIDs) {
			t.Errorf("lab image layers %v, want the product image's %v and one more", ids, productCfg.RootFS.DiffIDs)
		}
		if want := []string{"/usr/local/bin/" + LabBinary, "app", "client"}; !slices.Equal(labCfg.Config.Cmd, want) || labCfg.Config.Entrypoint != nil {
			t.Errorf("lab image entrypoint %v cmd %v, want none and %v", labCfg.Config.Entrypoint, labCfg.Config.Cmd, want)
		}
		if !slices.Equal(labCfg.Config.Env, productCfg.Config.Env) || labCfg.Config.Labels["org.opencontainers.image.revision"] != productCfg.Config.Labels["org.opencontainers.image.revision"] {
			t.Errorf("lab image env %v labels %v, want the product image's %v %v", labCfg.Config.Env, labCfg.Config.Labels, productCfg.Config.Env, productCfg.Config.Labels)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds, two lab image digests: %s, %s", digests[0], digests[1])
	}

	other := filepath.Join(t.TempDir(), "gateway")
	if err := os.WriteFile(other, []byte("binary gateway"), 0o755); err != nil {
		t.Fatal(err)
	}
	product, err := Build(testConfig(base, fakeBinaries(t, created, 0o755)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := BuildLab(product, other, created); err == nil {
		t.Error("BuildLab took a binary not named " + LabBinary)
	}
}

// imageFiles maps each regular file of img's flattened filesystem to its
// content.
func imageFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = string(b)
		}
	}
}

func mustConfig(t *testing.T, img v1.Image) *v1.ConfigFile {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf
}
