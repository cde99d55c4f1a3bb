// Package plaincache caches one Kubernetes resource as plain Go values.
//
// A client-go Reflector lists and watches the resource; each object it
// decodes is converted to the value its reader needs and then dropped.
// Next to an informer's cache, nothing keeps the decoded objects, their
// keys twice or a namespace index: a Store holds one map of values by
// namespace and name and, when asked for, one index of keys by group.
// Readers get the values themselves: they share their slices with the
// store and must not modify them.
package plaincache

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"unique"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// Config describes the cached resource and what is kept of each object.
type Config[T any] struct {
	// Name names the store's reflector in client-go's logs.
	Name string
	// ListWatch lists and watches the resource.
	ListWatch cache.ListerWatcher
	// Example is an object of the resource's Go type.
	Example runtime.Object
	// Transform, if set, slims the decoded objects the reflector holds
	// while it receives the initial list (before Convert sees them).
	Transform cache.TransformFunc
	// Convert returns the value kept for obj; ok false keeps none, as if
	// the object did not exist.
	Convert func(obj any) (v T, ok bool)
	// Groups, if set, names the groups a value belongs to: Group lists the
	// values of one group.
	Groups func(key types.NamespacedName, v T) []string
	// Observe, if set, sees every change of a key's value as Notify's
	// receiver does (old or new nil when the key had or has no value),
	// from the first list on whether or not Notify was called, outside
	// the store's lock and before the receiver.
	Observe func(key types.NamespacedName, old, new *T)
}

// Item is one cached value and the key of its object.
type Item[T any] struct {
	Key   types.NamespacedName
	Value T
}

// Store is the cache of one resource. Its zero value is not usable: make
// one with New and fill it with Run.
type Store[T any] struct {
	cfg    Config[T]
	synced chan struct{}

	mu         sync.RWMutex
	items      map[types.NamespacedName]*T // values are never modified, only replaced
	groups     map[string][]types.NamespacedName
	namespaces map[string]int // values per namespace
	// onChange receives the changes (Notify); nil before.
	onChange func(key types.NamespacedName, old, new *T)
}

// New returns an empty store of the resource cfg describes.
func New[T any](cfg Config[T]) *Store[T] {
	return &Store[T]{cfg: cfg, synced: make(chan struct{}), items: map[types.NamespacedName]*T{},
		groups: map[string][]types.NamespacedName{}, namespaces: map[string]int{}}
}

// Run lists and watches the resource until ctx ends.
func (s *Store[T]) Run(ctx context.Context) {
	r := cache.NewReflectorWithOptions(s.cfg.ListWatch, s.cfg.Example, &reflectorStore[T]{s: s},
		cache.ReflectorOptions{Name: s.cfg.Name})
	r.RunWithContext(ctx)
}

// Notify reports to onChange every value the store holds, as new, and
// from then on every change of a key's value (old or new nil when the key
// had or has no value), outside the store's lock: a list reports every
// object as new, a relist every object again. old and new are the store's
// own: read only. A store has one receiver; Notify replaces the last.
func (s *Store[T]) Notify(onChange func(key types.NamespacedName, old, new *T)) {
	s.mu.Lock()
	s.onChange = onChange
	cs := make([]change[T], 0, len(s.items))
	for key, v := range s.items {
		cs = append(cs, change[T]{key: key, new: v})
	}
	s.mu.Unlock()
	if onChange == nil {
		return
	}
	for _, c := range cs {
		onChange(c.key, c.old, c.new)
	}
}

// WaitForSync waits until the store holds the initial list, or ctx ends.
func (s *Store[T]) WaitForSync(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s cache never synced: %w", s.cfg.Name, ctx.Err())
	}
}

// Get returns the value of key.
func (s *Store[T]) Get(key types.NamespacedName) (T, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if v, ok := s.items[key]; ok {
		return *v, true
	}
	var zero T
	return zero, false
}

// Group returns the values in group g, in no particular order.
func (s *Store[T]) Group(g string) []Item[T] {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := s.groups[g]
	out := make([]Item[T], 0, len(keys))
	for _, k := range keys {
		out = append(out, Item[T]{Key: k, Value: *s.items[k]})
	}
	return out
}

// Namespaces returns the namespaces holding cached values, in no
// particular order.
func (s *Store[T]) Namespaces() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.namespaces))
	for ns := range s.namespaces {
		out = append(out, ns)
	}
	return out
}

// Len returns the number of cached values.
func (s *Store[T]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

// change is one key's change, reported after the lock is released.
type change[T any] struct {
	key      types.NamespacedName
	old, new *T
}

// setLocked stores v (nil: none) under key and returns the change.
func (s *Store[T]) setLocked(key types.NamespacedName, v *T) change[T] {
	old := s.items[key]
	if old != nil {
		s.ungroupLocked(key, *old)
		if s.namespaces[key.Namespace]--; s.namespaces[key.Namespace] == 0 {
			delete(s.namespaces, key.Namespace)
		}
	}
	if v == nil {
		delete(s.items, key)
		return change[T]{key: key, old: old}
	}
	s.items[key] = v
	s.namespaces[key.Namespace]++
	if s.cfg.Groups != nil {
		for _, g := range s.cfg.Groups(key, *v) {
			s.groups[g] = append(s.groups[g], key)
		}
	}
	return change[T]{key: key, old: old, new: v}
}

func (s *Store[T]) ungroupLocked(key types.NamespacedName, v T) {
	if s.cfg.Groups == nil {
		return
	}
	for _, g := range s.cfg.Groups(key, v) {
		keys := slices.DeleteFunc(s.groups[g], func(k types.NamespacedName) bool { return k == key })
		if len(keys) == 0 {
			delete(s.groups, g)
		} else {
			s.groups[g] = keys
		}
	}
}

// reflectorStore is what the reflector writes to: it converts each
// object and reports the changes.
type reflectorStore[T any] struct{ s *Store[T] }

// entry converts obj into its key and value (nil: none kept).
func (r *reflectorStore[T]) entry(obj any) (types.NamespacedName, *T, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return types.NamespacedName{}, nil, fmt.Errorf("%s cache: %w", r.s.cfg.Name, err)
	}
	// Namespaces repeat across objects: one copy of each.
	key := types.NamespacedName{Namespace: unique.Make(m.GetNamespace()).Value(), Name: m.GetName()}
	if v, ok := r.s.cfg.Convert(obj); ok {
		return key, &v, nil
	}
	return key, nil, nil
}

// report passes the changes to Config.Observe and onChange (none while
// it is nil).
func (s *Store[T]) report(onChange func(key types.NamespacedName, old, new *T), cs []change[T]) {
	for _, c := range cs {
		if c.old == nil && c.new == nil {
			continue
		}
		if s.cfg.Observe != nil {
			s.cfg.Observe(c.key, c.old, c.new)
		}
		if onChange != nil {
			onChange(c.key, c.old, c.new)
		}
	}
}

func (r *reflectorStore[T]) Add(obj any) error { return r.Update(obj) }

func (r *reflectorStore[T]) Update(obj any) error {
	key, v, err := r.entry(obj)
	if err != nil {
		return err
	}
	r.set(key, v)
	return nil
}

func (r *reflectorStore[T]) Delete(obj any) error {
	key, _, err := r.entry(obj)
	if err != nil {
		return err
	}
	r.set(key, nil)
	return nil
}

// set stores v (nil: none) under key and reports the change.
func (r *reflectorStore[T]) set(key types.NamespacedName, v *T) {
	r.s.mu.Lock()
	c, onChange := r.s.setLocked(key, v), r.s.onChange
	r.s.mu.Unlock()
	r.s.report(onChange, []change[T]{c})
}

// Replace puts the store in the state of a full list: keys not in it are
// removed.
func (r *reflectorStore[T]) Replace(list []any, _ string) error {
	listed := make(map[types.NamespacedName]*T, len(list)) // nil: listed, not kept
	for _, obj := range list {
		key, v, err := r.entry(obj)
		if err != nil {
			return err
		}
		listed[key] = v
	}
	r.s.mu.Lock()
	var cs []change[T]
	for key := range r.s.items {
		if _, ok := listed[key]; !ok {
			cs = append(cs, r.s.setLocked(key, nil))
		}
	}
	for key, v := range listed {
		cs = append(cs, r.s.setLocked(key, v))
	}
	onChange := r.s.onChange
	r.s.mu.Unlock()
	r.s.report(onChange, cs)
	select {
	case <-r.s.synced:
	default:
		close(r.s.synced)
	}
	return nil
}

// Resync is part of the reflector's store interface; a reflector without
// a resync period, as Run makes, never calls it.
func (r *reflectorStore[T]) Resync() error { return nil }

// Transformer slims the objects the reflector holds during a list.
func (r *reflectorStore[T]) Transformer() cache.TransformFunc { return r.s.cfg.Transform }

// Keys returns the key of every cached value, in no particular order.
func (s *Store[T]) Keys() []types.NamespacedName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Collect(maps.Keys(s.items))
}

// Items returns every cached value with its key, in no particular order.
func (s *Store[T]) Items() []Item[T] {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Item[T], 0, len(s.items))
	for k, v := range s.items {
		out = append(out, Item[T]{Key: k, Value: *v})
	}
	return out
}
