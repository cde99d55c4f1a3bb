// Command image builds Causeway's container image without a container
// daemon (`make image`): it builds the binaries, puts the product's on the
// cached Debian base layer (hack/image/base.sh) and writes an OCI image
// layout and a `docker load` tarball; and the lab image, that image plus
// the lab's binary, as a `docker load` tarball of its own for `causeway-lab
// up --runtime containerd`. It runs in the repository's root directory.
// See README.md beside it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/causeway-net/causeway/internal/imagebuild"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		base     = flag.String("base", "", "base layer (the path hack/image/base.sh prints)")
		layout   = flag.String("layout", "bin/image", "OCI image layout directory to write")
		tarFile  = flag.String("tarball", "bin/causeway-image.tar", "`docker load` tarball to write, tagged with the first --tags entry")
		labFile  = flag.String("lab-tarball", "bin/causeway-lab-image.tar", "`docker load` tarball of the lab image to write, tagged "+imagebuild.LabRepository+":<first --tags entry>")
		repo     = flag.String("repository", imagebuild.Repository, "repository of the tags")
		tags     = flag.String("tags", "", "comma-separated tags, e.g. the version and the commit")
		epoch    = flag.Int64("epoch", 0, "creation time, in seconds since 1970 (SOURCE_DATE_EPOCH, the commit time)")
		source   = flag.String("source", imagebuild.Source, "org.opencontainers.image.source")
		revision = flag.String("revision", "", "org.opencontainers.image.revision: the commit")
		version  = flag.String("version", "", "org.opencontainers.image.version")
	)
	flag.Parse()
	if *base == "" || *tags == "" || *epoch <= 0 || *revision == "" || *version == "" {
		return fmt.Errorf("--base, --tags, --epoch, --revision and --version are required")
	}
	var refs []name.Tag
	for _, t := range strings.Split(*tags, ",") {
		ref, err := name.NewTag(*repo+":"+t, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("--tags %q: %w", t, err)
		}
		refs = append(refs, ref)
	}

	bins, err := os.MkdirTemp("", "causeway-image-bin")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bins)
	product, labBin, err := imagebuild.BuildBinaries(context.Background(), ".", bins)
	if err != nil {
		return err
	}
	img, err := imagebuild.Build(imagebuild.Config{
		BaseLayer: *base, Binaries: product, Created: time.Unix(*epoch, 0),
		Source: *source, Revision: *revision, Version: *version,
	})
	if err != nil {
		return err
	}
	if err := imagebuild.WriteLayout(*layout, img, refs); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*tarFile), 0o755); err != nil {
		return err
	}
	if err := imagebuild.WriteTarball(*tarFile, img, refs[0]); err != nil {
		return err
	}
	labImg, err := imagebuild.BuildLab(img, labBin, time.Unix(*epoch, 0))
	if err != nil {
		return err
	}
	labRef, err := name.NewTag(imagebuild.LabRepository+":"+refs[0].TagStr(), name.StrictValidation)
	if err != nil {
		return fmt.Errorf("lab image tag: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(*labFile), 0o755); err != nil {
		return err
	}
	if err := imagebuild.WriteTarball(*labFile, labImg, labRef); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	size, err := imageSize(img)
	if err != nil {
		return err
	}
	fmt.Printf("%s %s (%s compressed)\n", digest, *layout, size)
	for _, r := range refs {
		fmt.Printf("  %s\n", r)
	}
	fmt.Printf("  %s (docker load: %s)\n", *tarFile, refs[0])
	labDigest, err := labImg.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s lab image: %s (docker load: %s)\n", labDigest, *labFile, labRef)
	return nil
}

// imageSize is the sum of img's compressed layers, in MiB.
func imageSize(img v1.Image) (string, error) {
	layers, err := img.Layers()
	if err != nil {
		return "", err
	}
	var n int64
	for _, l := range layers {
		s, err := l.Size()
		if err != nil {
			return "", err
		}
		n += s
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)), nil
}
