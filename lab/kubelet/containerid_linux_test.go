package kubelet

import "testing"

func TestContainerPID(t *testing.T) {
	if pid, ok := ContainerPID(containerID(4242)); !ok || pid != 4242 {
		t.Errorf("ContainerPID(containerID(4242)) = %d, %v", pid, ok)
	}
	for _, id := range []string{"", "lab://", "lab://x", "lab://0", "lab://-3", "containerd://4242"} {
		if pid, ok := ContainerPID(id); ok {
			t.Errorf("ContainerPID(%q) = %d, true; want not the lab kubelet's", id, pid)
		}
	}
}
