package plaincache_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/kube/plaincache"
)

// value is what the test keeps of a ConfigMap: its "v" and its group
// (label "g"). ConfigMaps labelled skip=yes are not kept.
type value struct{ v, group string }

// TestStoreFollowsTheAPI runs a Store of ConfigMaps against a real
// kube-apiserver: objects that exist before it starts are in it once it
// has synced, creations, updates and deletions arrive with their old and
// new values, an object Convert refuses leaves the store, groups list
// their members, a receiver that comes later is told every value first.
// Observe sees the same changes, the initial list's before the store
// reports it has synced.
func TestStoreFollowsTheAPI(t *testing.T) {
	c := kubetest.Start(t, "plaincache")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cms := c.Kube.CoreV1().ConfigMaps("default")
	put := func(name, v, group string, skip bool) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"g": group}}, Data: map[string]string{"v": v}}
		if skip {
			cm.Labels["skip"] = "yes"
		}
		_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	put("before", "0", "a", false)

	var mu sync.Mutex
	var changes, observed []string
	show := func(p *value) string {
		if p == nil {
			return "-"
		}
		return p.v
	}
	s := plaincache.New(plaincache.Config[value]{
		Name:      "configmaps",
		ListWatch: cache.NewListWatchFromClient(c.Kube.CoreV1().RESTClient(), "configmaps", "default", fields.Everything()),
		Example:   &corev1.ConfigMap{},
		Convert: func(obj any) (value, bool) {
			cm := obj.(*corev1.ConfigMap)
			return value{v: cm.Data["v"], group: cm.Labels["g"]}, cm.Labels["skip"] != "yes"
		},
		Groups: func(_ types.NamespacedName, v value) []string { return []string{v.group} },
		Observe: func(key types.NamespacedName, old, new *value) {
			mu.Lock()
			defer mu.Unlock()
			observed = append(observed, fmt.Sprintf("%s %s→%s", key.Name, show(old), show(new)))
		},
	})
	go s.Run(ctx)
	s.Notify(func(key types.NamespacedName, old, new *value) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, fmt.Sprintf("%s %s→%s", key.Name, show(old), show(new)))
	})
	syncCtx, cancelSync := context.WithTimeout(ctx, time.Minute)
	defer cancelSync()
	if err := s.WaitForSync(syncCtx); err != nil {
		t.Fatal(err)
	}
	if v, ok := s.Get(types.NamespacedName{Namespace: "default", Name: "before"}); !ok || v.v != "0" {
		t.Fatalf("after sync, before = %+v %v, want v 0", v, ok)
	}
	mu.Lock()
	if !slices.Equal(observed, []string{"before -→0"}) {
		t.Errorf("observed %q by the time the store synced, want [before -→0]", observed)
	}
	mu.Unlock()

	put("x", "1", "a", false)
	put("x", "2", "b", false)
	put("y", "3", "b", false)
	put("y", "4", "b", true) // refused by Convert: leaves the store
	if err := cms.Delete(ctx, "before", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"before -→0", "x -→1", "x 1→2", "y -→3", "y 3→-", "before 0→-"}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		got, obs := slices.Clone(changes), slices.Clone(observed)
		mu.Unlock()
		if slices.Equal(got, want) && slices.Equal(obs, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("changes %q, observed %q, want %q", got, obs, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := s.Group("a"); len(got) != 0 {
		t.Errorf("group a: %+v, want empty (x moved to b, before deleted)", got)
	}
	if got := s.Group("b"); len(got) != 1 || got[0].Key.Name != "x" || got[0].Value.v != "2" {
		t.Errorf("group b: %+v, want x with v 2 only", got)
	}
	if _, ok := s.Get(types.NamespacedName{Namespace: "default", Name: "y"}); ok {
		t.Error("y is cached although Convert refused its last version")
	}
	if n := s.Len(); n != 1 {
		t.Errorf("Len = %d, want 1 (x)", n)
	}
	if ns := s.Namespaces(); !slices.Equal(ns, []string{"default"}) {
		t.Errorf("Namespaces = %q, want [default]", ns)
	}
	if items := s.Items(); len(items) != 1 || items[0].Key.Name != "x" || items[0].Value.v != "2" {
		t.Errorf("Items = %+v, want x with v 2 only", items)
	}
	if keys := s.Keys(); len(keys) != 1 || keys[0].Name != "x" {
		t.Errorf("Keys = %v, want x only", keys)
	}
	// A new receiver is told every value first, as new.
	var replayed []string
	s.Notify(func(key types.NamespacedName, old, new *value) {
		mu.Lock()
		defer mu.Unlock()
		if old == nil && new != nil {
			replayed = append(replayed, key.Name+" "+new.v)
		}
	})
	mu.Lock()
	if !slices.Equal(replayed, []string{"x 2"}) {
		t.Errorf("a new receiver was told %q, want [x 2]", replayed)
	}
	mu.Unlock()
}
