package kubelet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mount is a bind mount of a container: Source, a host path (a file or
// directory of a volume), at Target.
type mount struct {
	Source, Target string
	ReadOnly       bool
}

// volumeFile is one file of a Secret, ConfigMap, projected or downward-API
// volume.
type volumeFile struct {
	data []byte
	mode fs.FileMode
}

// defaultTokenSeconds is a projected ServiceAccount token's lifetime when
// the volume names none (the API server's default for pods).
const defaultTokenSeconds = 3607

// volumeDir is where a pod's volume lives below its state directory.
func (w *worker) volumeDir(name string) string {
	return filepath.Join(w.k.podDir(w.namespace, w.name), "volumes", name)
}

// syncVolumes brings every volume of the pod to what its sources say:
// Secret, ConfigMap, projected (ServiceAccount token by TokenRequest,
// renewed after 80 % of its lifetime; ConfigMap, Secret and downward-API
// items) and downward-API volumes are files below the pod's state
// directory, rewritten when their content changes; emptyDir is a
// directory there; hostPath is the host's path (through Config.HostPaths).
// It returns each volume's host path.
func (w *worker) syncVolumes(pod *corev1.Pod) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		dir := w.volumeDir(v.Name)
		var files map[string]volumeFile
		var err error
		switch src := v.VolumeSource; {
		case src.HostPath != nil:
			p, err := w.k.hostPath(src.HostPath)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			out[v.Name] = p
			continue
		case src.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			out[v.Name] = dir
			continue
		case src.Secret != nil:
			files, err = w.objectFiles(pod, "Secret", src.Secret.SecretName, src.Secret.Items, src.Secret.DefaultMode, src.Secret.Optional)
		case src.ConfigMap != nil:
			files, err = w.objectFiles(pod, "ConfigMap", src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.DefaultMode, src.ConfigMap.Optional)
		case src.DownwardAPI != nil:
			files, err = w.downwardFiles(pod, src.DownwardAPI.Items, src.DownwardAPI.DefaultMode)
		case src.Projected != nil:
			files, err = w.projectedFiles(pod, v.Name, src.Projected)
		default:
			return nil, fmt.Errorf("volume %s: only secret, configMap, projected, downwardAPI, emptyDir and hostPath volumes are supported", v.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if err := writeVolume(dir, files); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		out[v.Name] = dir
	}
	return out, nil
}

// hostPath is the host path of a hostPath volume, created as its type
// asks (DirectoryOrCreate, FileOrCreate).
func (k *Kubelet) hostPath(hp *corev1.HostPathVolumeSource) (string, error) {
	p := filepath.Clean(hp.Path)
	for from, to := range k.cfg.HostPaths {
		if rest, ok := strings.CutPrefix(p, from); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
			p = to + rest
			break
		}
	}
	var t corev1.HostPathType
	if hp.Type != nil {
		t = *hp.Type
	}
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		return p, os.MkdirAll(p, 0o755)
	case corev1.HostPathFileOrCreate:
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDONLY, 0o644)
		if err != nil {
			return "", err
		}
		return p, f.Close()
	case "":
		return p, nil
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("hostPath %s (%s): %w", p, t, err)
	}
	return p, nil
}

func fileMode(m *int32, def int32) fs.FileMode {
	if m != nil {
		return fs.FileMode(*m)
	}
	return fs.FileMode(def)
}

// keyFiles turns a Secret's or ConfigMap's data into files: every key, or
// the listed items (a missing listed key is an error).
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, defaultMode fs.FileMode) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = volumeFile{data: v, mode: defaultMode}
		}
		return files, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return nil, fmt.Errorf("key %q not found", it.Key)
		}
		files[it.Path] = volumeFile{data: v, mode: fileMode(it.Mode, int32(defaultMode))}
	}
	return files, nil
}

// objectFiles are the files of ConfigMap or Secret (kind) name of the
// pod's namespace; a missing one is an error unless optional.
func (w *worker) objectFiles(pod *corev1.Pod, kind, name string, items []corev1.KeyToPath, mode *int32, optional *bool) (map[string]volumeFile, error) {
	data, err := keyData(w.ctx, w.k.cfg.Client, kind, pod.Namespace, name)
	if err != nil {
		return nil, err
	}
	if data == nil {
		if optional != nil && *optional {
			return map[string]volumeFile{}, nil
		}
		return nil, fmt.Errorf("%s %s/%s not found", kind, pod.Namespace, name)
	}
	files, err := keyFiles(data, items, fileMode(mode, 0o644))
	if err != nil {
		return nil, fmt.Errorf("keys of %s %s/%s: %w", kind, pod.Namespace, name, err)
	}
	return files, nil
}

func (w *worker) downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode *int32) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	for _, it := range items {
		if it.FieldRef == nil {
			return nil, fmt.Errorf("downward API file %s: only fieldRef is supported", it.Path)
		}
		v, ok := fieldValue(pod, it.FieldRef.FieldPath, w.podIP(), w.k.cfg.Node.Address.Addr().String())
		if !ok {
			return nil, fmt.Errorf("downward API file %s: field %s is not supported", it.Path, it.FieldRef.FieldPath)
		}
		files[it.Path] = volumeFile{data: []byte(v), mode: fileMode(it.Mode, int32(fileMode(mode, 0o644)))}
	}
	return files, nil
}

// projectedFiles are the files of a projected volume; a ServiceAccount
// token is requested again once 80 % of its lifetime has passed.
func (w *worker) projectedFiles(pod *corev1.Pod, volume string, p *corev1.ProjectedVolumeSource) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	add := func(more map[string]volumeFile, err error) error {
		for k, v := range more {
			files[k] = v
		}
		return err
	}
	for _, src := range p.Sources {
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			err = add(w.tokenFile(pod, volume, src.ServiceAccountToken, p.DefaultMode))
		case src.ConfigMap != nil:
			err = add(w.objectFiles(pod, "ConfigMap", src.ConfigMap.Name, src.ConfigMap.Items, p.DefaultMode, src.ConfigMap.Optional))
		case src.Secret != nil:
			err = add(w.objectFiles(pod, "Secret", src.Secret.Name, src.Secret.Items, p.DefaultMode, src.Secret.Optional))
		case src.DownwardAPI != nil:
			err = add(w.downwardFiles(pod, src.DownwardAPI.Items, p.DefaultMode))
		default:
			err = errors.New("only serviceAccountToken, configMap, secret and downwardAPI projections are supported")
		}
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// token is a ServiceAccount token the worker keeps for a projected volume.
type token struct {
	value   []byte
	renewAt time.Time
}

func (w *worker) tokenFile(pod *corev1.Pod, volume string, src *corev1.ServiceAccountTokenProjection, mode *int32) (map[string]volumeFile, error) {
	key := volume + "/" + src.Path
	t, ok := w.tokens[key]
	if !ok || time.Now().After(t.renewAt) {
		seconds := int64(defaultTokenSeconds)
		if src.ExpirationSeconds != nil {
			seconds = *src.ExpirationSeconds
		}
		var aud []string
		if src.Audience != "" {
			aud = []string{src.Audience}
		}
		sa := pod.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		tr, err := w.k.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(w.ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				Audiences:         aud,
				ExpirationSeconds: &seconds,
				BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("token of ServiceAccount %s: %w", sa, err)
		}
		lifetime := time.Until(tr.Status.ExpirationTimestamp.Time)
		t = token{value: []byte(tr.Status.Token), renewAt: time.Now().Add(lifetime * 4 / 5)}
		w.tokens[key] = t
	}
	return map[string]volumeFile{src.Path: {data: t.value, mode: fileMode(mode, 0o644)}}, nil
}

// writeVolume makes dir hold exactly files: changed files are rewritten
// (through a temporary file and a rename), others removed.
func writeVolume(dir string, files map[string]volumeFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for rel, f := range files {
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("file path %q leaves the volume", rel)
		}
		p := filepath.Join(dir, rel)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, f.data) {
			if st, err := os.Stat(p); err == nil && st.Mode().Perm() == f.mode.Perm() {
				continue
			}
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, f.data, f.mode.Perm()); err != nil {
			return err
		}
		if err := os.Chmod(tmp, f.mode.Perm()); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			return err
		}
	}
	var stale []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if _, ok := files[rel]; !ok {
			stale = append(stale, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(stale)
	for _, p := range stale {
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	return nil
}

// containerMounts are the bind mounts of container c: each volumeMount's
// volume (or its subPath) at the mount path. A mount point missing on the
// host is created there (an empty directory or file): without an image
// filesystem, the container's paths are the host's.
func containerMounts(c corev1.Container, vols map[string]string) ([]mount, error) {
	var out []mount
	for _, vm := range c.VolumeMounts {
		src, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %s: no volume %q", vm.MountPath, vm.Name)
		}
		if vm.SubPath != "" {
			if !filepath.IsLocal(vm.SubPath) {
				return nil, fmt.Errorf("volume mount %s: subPath %q leaves the volume", vm.MountPath, vm.SubPath)
			}
			src = filepath.Join(src, vm.SubPath)
		}
		st, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("volume mount %s: %w", vm.MountPath, err)
		}
		target := filepath.Clean(vm.MountPath)
		if st.IsDir() {
			err = os.MkdirAll(target, 0o755)
		} else if _, serr := os.Stat(target); errors.Is(serr, fs.ErrNotExist) {
			if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
				err = os.WriteFile(target, nil, 0o644)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("volume mount %s: mount point: %w", vm.MountPath, err)
		}
		out = append(out, mount{Source: src, Target: target, ReadOnly: vm.ReadOnly})
	}
	return out, nil
}

// mountScript is the sh script that, in a fresh private mount namespace
// (unshare --mount --propagation slave), bind-mounts mounts and then
// execs its arguments.
func mountScript(mounts []mount) string {
	var b strings.Builder
	for _, m := range mounts {
		fmt.Fprintf(&b, "mount --bind %s %s || exit 126\n", shellQuote(m.Source), shellQuote(m.Target))
		if m.ReadOnly {
			fmt.Fprintf(&b, "mount -o remount,bind,ro %s || exit 126\n", shellQuote(m.Target))
		}
	}
	b.WriteString(`exec "$@"`)
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
