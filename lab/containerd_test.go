package lab

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/causeway-net/causeway/internal/imagebuild"
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

// In a containerd lab the demo Pods run causeway-lab from the lab image,
// never from Causeway's image, which has no causeway-lab.
func TestContainerdDemoRunsLabImage(t *testing.T) {
	top, err := Config{Prefix: "cwl-", Clusters: 3, Nodes: 2}.Topology()
	if err != nil {
		t.Fatal(err)
	}
	st := &State{Prefix: "cwl-", Topology: top, Demo: true, Runtime: RuntimeContainerd, ImageTag: "v1"}
	want := imagebuild.LabRepository + ":v1"
	var n int
	for _, c := range top.Clusters {
		for _, o := range st.DemoObjects(c.Name) {
			var spec *corev1.PodSpec
			switch o := o.(type) {
			case *corev1.Pod:
				spec = &o.Spec
			case *appsv1.Deployment:
				spec = &o.Spec.Template.Spec
			default:
				continue
			}
			for _, ctr := range spec.Containers {
				n++
				if ctr.Image != want || len(ctr.Command) == 0 || ctr.Command[0] != "/usr/local/bin/"+imagebuild.LabBinary {
					t.Errorf("%s: %s container %s runs %v of %s, want /usr/local/bin/%s of %s",
						c.Name, o.GetName(), ctr.Name, ctr.Command, ctr.Image, imagebuild.LabBinary, want)
				}
			}
		}
	}
	if n < 5 {
		t.Errorf("%d demo containers, want a client per cluster and whereami in two", n)
	}
}
