package imagebuild

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/causeway-net/causeway/pkg/cable/ipsec"
	"github.com/causeway-net/causeway/pkg/chart"
)

// moduleDir is the repository root, seen from this package.
const moduleDir = "../.."

// TestImageRuns builds the real images the way `make image` does (the
// cached Debian base from hack/image/base.sh, the binaries from ./cmd),
// reads the product image back from its OCI layout, unpacks its flattened
// filesystem and runs, chrooted into it, every product binary's --help
// and every tool the daemons exec; it has no causeway-lab. Then it
// unpacks the lab image's one more layer over it and runs causeway-lab,
// static, there. It needs root (chroot; base.sh builds the base when the
// cache lacks it) and fails under root when any step fails.
func TestImageRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image; skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot and hack/image/base.sh need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	out, err := exec.CommandContext(ctx, filepath.Join(moduleDir, "hack/image/base.sh")).Output()
	if err != nil {
		t.Fatalf("hack/image/base.sh: %v\n%s", err, stderr(err))
	}
	base := strings.TrimSpace(string(out))
	product, lab, err := BuildBinaries(ctx, moduleDir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(Config{BaseLayer: base, Binaries: product, Created: created,
		Source: Source, Revision: "test", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := WriteLayout(dir, img, []name.Tag{name.MustParseReference(Repository + ":test").(name.Tag)}); err != nil {
		t.Fatal(err)
	}
	fromLayout, err := layoutImage(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	fs := mutate.Extract(fromLayout)
	defer fs.Close()
	if err := untar(fs, root); err != nil {
		t.Fatalf("unpack the image: %v", err)
	}
	// The devices a container runtime gives every container (charon and
	// swanctl read /dev/urandom).
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}} {
		if err := syscall.Mknod(filepath.Join(root, "dev", d.name), syscall.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			t.Fatalf("mknod /dev/%s: %v", d.name, err)
		}
	}

	cmds, err := os.ReadDir(filepath.Join(moduleDir, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var checks [][]string
	for _, c := range cmds {
		if c.IsDir() && c.Name() != LabBinary {
			checks = append(checks, []string{filepath.Join(BinDir, c.Name()), "--help"})
		}
	}
	if len(checks) < 4 {
		t.Fatalf("found %d product commands under cmd/, want every Causeway binary", len(checks))
	}
	for _, c := range checks {
		requireStatic(t, filepath.Join(root, c[0]))
	}
	labPath := filepath.Join(root, BinDir, LabBinary)
	if _, err := os.Lstat(labPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the product image has %s (%v)", filepath.Join(BinDir, LabBinary), err)
	}
	// What the chart's workloads exec is among them.
	for _, c := range chartCommands(t) {
		if !slices.ContainsFunc(checks, func(ch []string) bool { return ch[0] == c }) {
			t.Errorf("the chart's workloads exec %s, which the image does not have (binaries: %v)", c, checks)
		}
	}
	checks = append(checks,
		// route agent: iptables-save/-restore, or the nft / legacy ones
		// that --iptables-backend picks.
		[]string{"iptables-save", "--version"}, []string{"iptables-restore", "--version"},
		[]string{"iptables-nft-save", "--version"}, []string{"iptables-nft-restore", "--version"},
		[]string{"iptables-legacy-save", "--version"}, []string{"iptables-legacy-restore", "--version"},
		// globalnet.
		[]string{"nft", "--version"},
		// IPsec cable: charon, started through /bin/sh with mount.
		[]string{ipsec.Charon, "--version"}, []string{"sh", "-c", "command -v mount"},
		// swanctl --version asks charon over vici; --help runs alone.
		[]string{"swanctl", "--help"},
		// For operators.
		[]string{"ip", "-V"}, []string{"conntrack", "--version"}, []string{"wg", "--version"},
	)
	// Every charon plugin the driver loads is there with all its libraries.
	for _, p := range append(append([]string{}, ipsec.FastPlugins...), ipsec.BasePlugins...) {
		so := filepath.Join(ipsec.PluginDir, "libstrongswan-"+p+".so")
		checks = append(checks, []string{"sh", "-c", fmt.Sprintf(`ldd %s && ! ldd %s | grep -q "not found"`, so, so)})
	}
	for _, c := range checks {
		out, err := chrooted(ctx, root, c...)
		if err != nil {
			t.Errorf("in the image, %s: %v\n%s", strings.Join(c, " "), err, out)
			continue
		}
		t.Logf("%s: %.80s", strings.Join(c, " "), strings.SplitN(strings.TrimSpace(out), "\n", 2)[0])
	}

	// The lab image: the product image's layers and one with causeway-lab.
	labImg, err := BuildLab(fromLayout, lab, created)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := labImg.Layers()
	if err != nil {
		t.Fatal(err)
	}
	top, err := layers[len(layers)-1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	if err := untar(top, root); err != nil {
		t.Fatalf("unpack the lab image's layer: %v", err)
	}
	requireStatic(t, labPath)
	if out, err := chrooted(ctx, root, LabBinary, "app", "--help"); err != nil || !strings.Contains(out, "whereami") {
		t.Errorf("in the lab image, %s app --help: %v\n%s", LabBinary, err, out)
	}
}

// requireStatic fails unless the ELF executable at file is statically
// linked: it names no program interpreter (the dynamic loader).
func requireStatic(t *testing.T, file string) {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Errorf("%s: %v", file, err)
		return
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", file)
		}
	}
}

// chartCommands are the command[0] of every container of the workloads
// the Helm chart renders with a cluster's required values.
func chartCommands(t *testing.T) []string {
	t.Helper()
	objs, err := chart.Render(map[string]any{"clusterID": "c1", "podCIDRs": []any{"10.244.0.0/16"}, "serviceCIDRs": []any{"10.96.0.0/16"}})
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, o := range objs {
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			cmd, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "command")
			if len(cmd) > 0 {
				cmds = append(cmds, cmd[0])
			}
		}
	}
	if len(cmds) < 3 {
		t.Fatalf("found %d container commands in the chart, want one per workload", len(cmds))
	}
	return cmds
}

// chrooted runs args in root with the image's PATH: a bare command name
// is looked up there, not on the host.
func chrooted(ctx context.Context, root string, args ...string) (string, error) {
	bin := args[0]
	if !strings.Contains(bin, "/") {
		bin = ""
		for _, d := range filepath.SplitList(Path) {
			if fi, err := os.Lstat(filepath.Join(root, d, args[0])); err == nil && !fi.IsDir() {
				bin = filepath.Join(d, args[0])
				break
			}
		}
		if bin == "" {
			return "", fmt.Errorf("%s is not on the image's PATH", args[0])
		}
	}
	cmd := exec.CommandContext(ctx, bin, args[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + Path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// untar unpacks a flattened image filesystem into dir, with owners and
// modes (it runs as root).
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := filepath.Clean("/" + h.Name)
		if rel == "/" {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(dir, filepath.Clean("/"+h.Linkname)), p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := os.Chmod(p, os.FileMode(h.Mode).Perm()|modeBits(h.Mode)); err != nil {
				return err
			}
		}
	}
}

// modeBits converts tar's setuid, setgid and sticky bits to os.FileMode's.
func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&04000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&02000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&01000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// stderr is the standard error of a failed exec.Cmd.Output.
func stderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
