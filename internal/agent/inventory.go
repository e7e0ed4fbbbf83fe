package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgov/lockgov/policy"
)

// ErrNoStore is returned by OpenInventory when it is given no store.
var ErrNoStore = errors.New("no store: give --redis URL or --etcd ENDPOINTS")

// Inventory reads the locks of some stores once, for `lockgov locks`.
type Inventory struct {
	stores []*store
	lister *lister
}

// OpenInventory opens the stores of redisURLs and etcd endpoints; patterns
// are the Redis SCAN patterns (default DefaultLockPattern); pol labels keys
// with their patterns (nil: the default policy). Errors name the flag.
func OpenInventory(redisURLs, etcd, patterns []string, pol *policy.Policy) (*Inventory, error) {
	if len(redisURLs) == 0 && len(etcd) == 0 {
		return nil, ErrNoStore
	}
	if len(patterns) == 0 {
		patterns = []string{DefaultLockPattern}
	}
	if pol == nil {
		pol = policy.Default()
	}
	in := &Inventory{lister: &lister{patterns: patterns, match: policy.NewMatcher(pol), now: time.Now}}
	var err error
	if in.stores, err = openRedis(redisURLs, StoreAuth{}); err != nil {
		return nil, err
	}
	if len(etcd) > 0 {
		s, err := openEtcd(etcd, StoreAuth{})
		if err != nil {
			in.Close()
			return nil, err
		}
		in.stores = append(in.stores, s)
	}
	return in, nil
}

// Stores returns the redacted names of the stores.
func (in *Inventory) Stores() []string {
	out := make([]string, len(in.stores))
	for i, s := range in.stores {
		out[i] = s.name
	}
	return out
}

// List calls visit for every lock, store by store, until visit returns
// false. Memory stays bounded by one scan batch, whatever the key count.
func (in *Inventory) List(ctx context.Context, visit func(Lock) bool) error {
	more := true
	for _, s := range in.stores {
		if !more {
			return nil
		}
		if _, err := in.lister.list(ctx, s, func(l Lock) bool { more = visit(l); return more }); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// Show returns the lock on key in each store that has one. An empty key is
// ErrEmptyKey. Errors name the store.
func (in *Inventory) Show(ctx context.Context, key string) ([]Lock, error) {
	if key == "" {
		return nil, ErrEmptyKey
	}
	var out []Lock
	for _, s := range in.stores {
		l, ok, err := in.lister.show(ctx, s, key)
		if err != nil {
			return out, fmt.Errorf("%s: %w", s.name, err)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out, nil
}

// Close closes the stores' clients.
func (in *Inventory) Close() error {
	var errs []error
	for _, s := range in.stores {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}
