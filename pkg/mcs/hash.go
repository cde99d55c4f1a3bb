package mcs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ContentHash is a hash of v's JSON form with null values, empty arrays
// and empty objects left out at every level, so that two values equal
// under equality.Semantic (which does not tell a nil slice or map from an
// empty one, as an API round trip does not) hash the same. A controller
// keeps it instead of the content of the objects it writes: the object it
// wants is unchanged when its hash is the existing one's.
func ContentHash(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		// The API types marshal; anything else is a programming error.
		panic(fmt.Sprintf("content hash of %T: %v", v, err))
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		panic(fmt.Sprintf("content hash of %T: %v", v, err))
	}
	pruned, _ := prune(tree)
	canon, err := json.Marshal(pruned) // object keys sorted
	if err != nil {
		panic(fmt.Sprintf("content hash of %T: %v", v, err))
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:16])
}

// prune drops null values and empty arrays and objects from a decoded JSON
// value; it reports false when v itself is empty.
func prune(v any) (any, bool) {
	switch t := v.(type) {
	case nil:
		return nil, false
	case map[string]any:
		for k, e := range t {
			if p, ok := prune(e); ok {
				t[k] = p
			} else {
				delete(t, k)
			}
		}
		return t, len(t) > 0
	case []any:
		for i, e := range t {
			// An element is kept in place (its position counts), empty
			// or not.
			t[i], _ = prune(e)
		}
		return t, len(t) > 0
	}
	return v, true
}

// SliceHash is the ContentHash of what RenderEndpointSlices sets on a
// slice: labels, annotations, owner references, address type, endpoints
// and ports.
func SliceHash(s *discoveryv1.EndpointSlice) string {
	return ContentHash(struct {
		Labels          map[string]string          `json:"labels"`
		Annotations     map[string]string          `json:"annotations"`
		OwnerReferences []metav1.OwnerReference    `json:"ownerReferences"`
		AddressType     discoveryv1.AddressType    `json:"addressType"`
		Endpoints       []discoveryv1.Endpoint     `json:"endpoints"`
		Ports           []discoveryv1.EndpointPort `json:"ports"`
	}{s.Labels, s.Annotations, s.OwnerReferences, s.AddressType, s.Endpoints, s.Ports})
}
