// Package imagebuild assembles Causeway's container image without a
// container daemon: the Debian base layer that hack/image/base.sh caches,
// plus one layer with the product's binaries at /usr/local/bin/<name>,
// written as an OCI image layout and as a tarball that `docker load`
// reads. The lab image is that image plus one layer with the lab's
// binary, for `causeway-lab up --runtime containerd`.
//
// The result is reproducible: the base layer is a cached file, the
// binaries' layer has sorted entries owned by 0:0 with the mtime of
// Config.Created, and the config's times are Config.Created too, so two
// builds of one commit have one digest. hack/image/README.md documents
// the image; hack/image is the command `make image` runs.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BinDir is where the image holds the binaries (the Helm chart's
// workloads exec /usr/local/bin/gateway and so on).
const BinDir = "/usr/local/bin"

// Repository is where the image is meant to be pushed; the Helm chart's
// image.repository names it.
const Repository = "ghcr.io/causeway-net/causeway"

// LabBinary is the lab's command, cmd/causeway-lab: BuildBinaries keeps
// it apart from the product's binaries, and only the lab image has it.
const LabBinary = "causeway-lab"

// LabRepository is the lab image's repository, a name of the lab's
// (like its causeway.dev/lab/whereami): the image is never pushed.
const LabRepository = "causeway.dev/lab/causeway-lab"

// Source is the org.opencontainers.image.source label: the repository.
const Source = "https://github.com/causeway-net/causeway"

// Path is the PATH of every process in the image.
const Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Config is what one image is built from.
type Config struct {
	// BaseLayer is the gzipped tar of the root filesystem
	// (hack/image/base.sh prints its path).
	BaseLayer string
	// Binaries is a directory whose regular files all go to BinDir.
	Binaries string
	// Created is the image's creation time and the binaries' mtime: the
	// commit time or SOURCE_DATE_EPOCH, never the build's clock.
	Created time.Time
	// Source, Revision and Version become the labels
	// org.opencontainers.image.source, .revision and .version.
	Source, Revision, Version string
}

// Build returns the image of cfg. Its layers are read lazily from
// cfg.BaseLayer and from memory.
func Build(cfg Config) (v1.Image, error) {
	created := v1.Time{Time: cfg.Created.UTC()}
	base, err := tarball.LayerFromFile(cfg.BaseLayer, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("base layer %s: %w", cfg.BaseLayer, err)
	}
	bins, names, err := binariesLayer(cfg.Binaries, cfg.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/image/base.sh: Debian minbase + hack/image/packages",
		}},
		mutate.Addendum{Layer: bins, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: fmt.Sprintf("hack/image: %v in %s", names, BinDir),
		}},
	)
	if err != nil {
		return nil, fmt.Errorf("append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config = v1.Config{
		Env:        []string{"PATH=" + Path},
		Cmd:        []string{"bash"},
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.source":   cfg.Source,
			"org.opencontainers.image.revision": cfg.Revision,
			"org.opencontainers.image.version":  cfg.Version,
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// binariesLayer is the layer with every regular file of dir at
// BinDir/<name>, mode 0755, owned by 0:0, with mtime t. It returns the
// names too.
func binariesLayer(dir string, t time.Time) (v1.Layer, []string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read binaries: %w", err)
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no binaries in %s", dir)
	}
	return filesLayer(files, t)
}

// filesLayer is the layer with every file at BinDir/<its base name>,
// sorted by name, mode 0755, owned by 0:0, with mtime t.
func filesLayer(files []string, t time.Time) (v1.Layer, []string, error) {
	byName := map[string]string{}
	var names []string
	for _, f := range files {
		byName[filepath.Base(f)] = f
		names = append(names, filepath.Base(f))
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		if err := addFile(tw, byName[n], path.Join(BinDir[1:], n), t); err != nil {
			return nil, nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, nil, fmt.Errorf("binaries layer: %w", err)
	}
	return l, names, nil
}

// BuildLab is the lab image: product plus one layer with the lab's
// binary lab at BinDir/LabBinary, with mtime created. Its command is
// `causeway-lab app client`, which waits for SIGTERM, so a containerd lab
// runs it as its sandbox (pause) image as well as its demo Pods' image.
func BuildLab(product v1.Image, lab string, created time.Time) (v1.Image, error) {
	if filepath.Base(lab) != LabBinary {
		return nil, fmt.Errorf("lab binary %s: want one named %s", lab, LabBinary)
	}
	l, _, err := filesLayer([]string{lab}, created)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(product, mutate.Addendum{Layer: l, MediaType: types.OCILayer, History: v1.History{
		Created: v1.Time{Time: created.UTC()}, CreatedBy: fmt.Sprintf("hack/image: %s in %s", LabBinary, BinDir),
	}})
	if err != nil {
		return nil, fmt.Errorf("append the lab's layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("lab image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Config.Cmd = []string{path.Join(BinDir, LabBinary), "app", "client"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set the lab image's config: %w", err)
	}
	return img, nil
}

// ReadTarball reads the image of a `docker save` tarball written by
// WriteTarball, with its tag.
func ReadTarball(file string) (v1.Image, name.Tag, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("read %s: %w", file, err)
	}
	if len(m) != 1 || len(m[0].RepoTags) == 0 {
		return nil, name.Tag{}, fmt.Errorf("%s: want one tagged image", file)
	}
	tag, err := name.NewTag(m[0].RepoTags[0])
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("%s: %w", file, err)
	}
	img, err := tarball.ImageFromPath(file, &tag)
	if err != nil {
		return nil, name.Tag{}, fmt.Errorf("read %s: %w", file, err)
	}
	return img, tag, nil
}

// WriteTarballs writes several images as one `docker save` tarball (the
// layers they share once).
func WriteTarballs(file string, imgs map[name.Tag]v1.Image) error {
	refs := map[name.Reference]v1.Image{}
	for t, img := range imgs {
		refs[t] = img
	}
	tmp := file + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", file, err)
	}
	return os.Rename(tmp, file)
}

func addFile(tw *tar.Writer, src, name string, t time.Time) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     0o755,
		Size:     st.Size(),
		ModTime:  t.UTC().Truncate(time.Second),
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("tar %s: %w", name, err)
	}
	if _, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("tar %s: %w", name, err)
	}
	return nil
}

// WriteLayout writes img as the OCI image layout dir (replacing what is
// there), with one index entry per tag, named by the annotation
// org.opencontainers.image.ref.name as skopeo's oci:DIR:TAG expects.
func WriteLayout(dir string, img v1.Image, tags []name.Tag) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("create layout %s: %w", dir, err)
	}
	for _, tag := range tags {
		ann := map[string]string{"org.opencontainers.image.ref.name": tag.TagStr()}
		if err := p.AppendImage(img, layout.WithAnnotations(ann)); err != nil {
			return fmt.Errorf("write %s to %s: %w", tag, dir, err)
		}
	}
	return nil
}

// WriteTarball writes img as a `docker save` tarball tagged tag (one tag:
// with several, go-containerregistry orders them at random and the file
// would differ between builds).
func WriteTarball(file string, img v1.Image, tag name.Tag) error {
	tmp := file + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", file, err)
	}
	return os.Rename(tmp, file)
}

// BuildBinaries builds every command under moduleDir/cmd as the images
// carry them: static (no cgo), without local paths, without the symbol
// table and DWARF (panics still name functions and lines). The product's
// go to the directory product, the lab's to the file lab
// (outDir/LabBinary), which are returned.
func BuildBinaries(ctx context.Context, moduleDir, outDir string) (product, lab string, err error) {
	product = filepath.Join(outDir, "product")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", product+"/", "./cmd/...")
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build ./cmd/...: %w\n%s", err, out)
	}
	lab = filepath.Join(outDir, LabBinary)
	if err := os.Rename(filepath.Join(product, LabBinary), lab); err != nil {
		return "", "", fmt.Errorf("move the lab's binary out of the product's: %w", err)
	}
	return product, lab, nil
}
