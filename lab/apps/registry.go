package apps

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Built-in image names.
const (
	ImageWhereami = "causeway.dev/lab/whereami"
	ImageClient   = "causeway.dev/lab/client"
)

// ErrUnknownImage is wrapped by Registry.Command for images that are no
// lab program, of containers that name no command to run from the host.
var ErrUnknownImage = errors.New("not a built-in lab program")

// ErrNoHostCommand is wrapped by Registry.Command when the command of a
// container of an unknown image is not found on the host.
var ErrNoHostCommand = errors.New("command not found on the host")

// Container is what the kubelet knows of the container to run.
type Container struct {
	Cluster   string
	Node      string
	Namespace string // pod namespace
	Pod       string // pod name
	PodIP     string
	// Ports are the container's declared ports; the first is the one
	// whereami serves.
	Ports []int32
	// Command and Args are the container's command and args ($(VAR)
	// references expanded): built-in programs ignore the command and
	// launchers of registered images decide what to do with them; a
	// container of an image the registry does not know runs its command
	// from the host (see Registry.Command).
	Command []string
	Args    []string
	Env     []string
	// WorkingDir is the container's workingDir ("" keeps the kubelet's).
	WorkingDir string
}

// Command is how to start a container's process.
type Command struct {
	Path string
	Args []string // without argv[0]
	Env  []string // added to the kubelet's environment
	Dir  string   // working directory; "" keeps the kubelet's
}

// Launcher turns a container into a command.
type Launcher func(Container) (Command, error)

// Registry maps image names to launchers.
type Registry struct {
	launchers map[string]Launcher
	// programs are the images registered with RegisterBinaries: where
	// their programs live in the image and on the host.
	programs map[string]programDirs
}

type programDirs struct{ image, host string }

// NewRegistry returns a registry with the built-in programs, run as
// `<self> app <name> …`, where self is the path of the causeway-lab
// binary (os.Executable()).
func NewRegistry(self string) *Registry {
	r := &Registry{launchers: map[string]Launcher{}, programs: map[string]programDirs{}}
	r.Register(ImageWhereami, func(c Container) (Command, error) {
		port := int32(8080)
		if len(c.Ports) > 0 {
			port = c.Ports[0]
		}
		args := []string{"app", "whereami",
			"--port", strconv.Itoa(int(port)),
			"--cluster", c.Cluster,
			"--namespace", c.Namespace,
			"--pod", c.Pod,
			"--node", c.Node,
		}
		if c.PodIP != "" {
			args = append(args, "--pod-ip", c.PodIP)
		}
		return Command{Path: self, Args: args, Env: c.Env}, nil
	})
	r.Register(ImageClient, func(c Container) (Command, error) {
		return Command{Path: self, Args: []string{"app", "client"}, Env: c.Env}, nil
	})
	return r
}

// Register adds or replaces the launcher of an image name (without tag or
// digest), e.g. to map "registry.k8s.io/coredns/coredns" to a CoreDNS
// binary built for the lab.
func (r *Registry) Register(image string, l Launcher) {
	r.launchers[ImageName(image)] = l
}

// RegisterBinaries registers an image whose programs live in imageDir
// (e.g. "/usr/local/bin" of Causeway's image) as the programs of dir on
// the host: containers run them (BinariesIn), and ExecPath finds them
// for `kubectl exec`.
func (r *Registry) RegisterBinaries(image, imageDir, dir string) {
	r.Register(image, BinariesIn(imageDir, dir))
	r.programs[ImageName(image)] = programDirs{image: imageDir, host: dir}
}

// ExecPath is the host program `kubectl exec` runs for command name in
// a container of image: a program of an image registered with
// RegisterBinaries (its path in the image, or its bare name) is the
// host's copy; anything else is looked up in the host's PATH (the lab
// runs host programs in its pods).
func (r *Registry) ExecPath(image, name string) (string, error) {
	if d, ok := r.programs[ImageName(image)]; ok {
		prog := strings.TrimPrefix(name, d.image+"/")
		if prog != "" && !strings.Contains(prog, "/") {
			if p := filepath.Join(d.host, prog); fileExists(p) {
				return p, nil
			}
		}
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("command %q not found on the host (the lab runs host programs in the pod): %w", name, err)
	}
	return path, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Images lists the registered image names, sorted.
func (r *Registry) Images() []string {
	out := make([]string, 0, len(r.launchers))
	for k := range r.launchers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Command returns how to run container c of image. An image the
// registry does not know runs the container's command from the host's
// filesystem, like a busybox pod's `sh -c …`: command[0] (a path, or a
// name looked up in the host's PATH) with command[1:] and the args, in the
// container's working directory. Without a command such a container
// cannot run (ErrUnknownImage): the image's entrypoint is unknown.
func (r *Registry) Command(image string, c Container) (Command, error) {
	l, ok := r.launchers[ImageName(image)]
	if !ok {
		// An image the lab does not know runs its command line from the
		// host's files: command + args, or, without a command, the args
		// (Kubernetes: args replace the image's default command, and the
		// lab knows no image's entrypoint).
		line := append(append([]string{}, c.Command...), c.Args...)
		if len(line) == 0 {
			return Command{}, fmt.Errorf("image %s is %w and the container has no command or args to run from the host; known: %s", image, ErrUnknownImage, strings.Join(r.Images(), ", "))
		}
		path, err := exec.LookPath(line[0])
		if err != nil {
			return Command{}, fmt.Errorf("image %s: %w: %q (the lab runs images it does not know from the host's files)", image, ErrNoHostCommand, line[0])
		}
		return Command{Path: path, Args: line[1:], Env: c.Env, Dir: c.WorkingDir}, nil
	}
	cmd, err := l(c)
	if err != nil {
		return Command{}, fmt.Errorf("image %s: %w", image, err)
	}
	return cmd, nil
}

// ImageName strips the tag and digest from an image reference:
// "causeway.dev/lab/whereami:v1" → "causeway.dev/lab/whereami". A port in
// the registry host ("host:5000/x") is kept.
func ImageName(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	slash := strings.LastIndex(ref, "/")
	if i := strings.LastIndex(ref, ":"); i > slash {
		ref = ref[:i]
	}
	return ref
}

// BinariesIn is a launcher for an image whose programs live in imageDir
// (e.g. "/usr/local/bin" of Causeway's image): a container whose command
// is <imageDir>/<name> runs <dir>/<name> with the rest of the command and
// the args, the container's env and working directory. A command outside
// imageDir, or a program not in dir, is refused.
func BinariesIn(imageDir, dir string) Launcher {
	return func(c Container) (Command, error) {
		if len(c.Command) == 0 {
			return Command{}, fmt.Errorf("the container has no command; the lab runs only %s/<program> of this image", imageDir)
		}
		name, ok := strings.CutPrefix(c.Command[0], imageDir+"/")
		if !ok || name == "" || strings.Contains(name, "/") {
			return Command{}, fmt.Errorf("command %s is not a program in %s of the image", c.Command[0], imageDir)
		}
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err != nil {
			return Command{}, fmt.Errorf("%w: %s (the lab runs %s from %s)", ErrNoHostCommand, path, c.Command[0], dir)
		}
		args := append(append([]string{}, c.Command[1:]...), c.Args...)
		return Command{Path: path, Args: args, Env: c.Env, Dir: c.WorkingDir}, nil
	}
}
