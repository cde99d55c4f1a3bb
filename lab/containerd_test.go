package lab

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The mount points a containerd lab creates are recorded parents first
// and removed by restoreHost; what existed before stays.
func TestCreatedMountPointsRemoved(t *testing.T) {
	root := t.TempDir()
	keep := filepath.Join(root, "var", "lib")
	if err := os.MkdirAll(keep, 0o755); err != nil {
		t.Fatal(err)
	}
	var created []string
	for _, mp := range []string{filepath.Join(keep, "kubelet"), filepath.Join(root, "etc", "cni", "net.d")} {
		c, err := mkdirAllCreated(mp)
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, c...)
	}
	want := []string{filepath.Join(keep, "kubelet"), filepath.Join(root, "etc"), filepath.Join(root, "etc", "cni"), filepath.Join(root, "etc", "cni", "net.d")}
	if !slices.Equal(created, want) {
		t.Fatalf("created %v, want %v", created, want)
	}
	if err := restoreHost(&HostChanges{Created: created}); err != nil {
		t.Fatal(err)
	}
	for _, d := range created {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", d, err)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("%s, there before, removed: %v", keep, err)
	}
}
