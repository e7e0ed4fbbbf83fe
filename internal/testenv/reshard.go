package testenv

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SlotMigration is one hash slot being moved from one primary of a
// RedisCluster to another, step by step, the way redis-cli --cluster
// reshard moves it: CLUSTER SETSLOT IMPORTING on the target, MIGRATING on
// the source, CLUSTER GETKEYSINSLOT + MIGRATE ... KEYS in batches, then
// CLUSTER SETSLOT NODE on every primary. Between Begin and Finish the slot
// is half-migrated: a key is on the source until a Move takes it, then on
// the target, and the nodes answer what Redis answers a client then (ASK
// for a key the source no longer has, TRYAGAIN for a multi-key command or
// script whose keys are split or partly absent).
type SlotMigration struct {
	c          *RedisCluster
	Slot       int
	From, To   *Redis
	fromID     string
	toID       string
	finished   bool
	MovedCount int // keys moved so far
}

// KeySlot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *RedisCluster) KeySlot(key string) (int, error) {
	s, err := command(c.Nodes[0].Addr(), "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

// SlotOwner returns the primary that serves slot, by each node's own view
// of itself (CLUSTER NODES, the "myself" line).
func (c *RedisCluster) SlotOwner(slot int) (*Redis, error) {
	for _, r := range c.Nodes {
		_, slots, err := myself(r)
		if err != nil {
			return nil, err
		}
		for _, rg := range slots {
			if slot >= rg[0] && slot <= rg[1] {
				return r, nil
			}
		}
	}
	return nil, fmt.Errorf("testenv: no node owns slot %d", slot)
}

// myself parses a node's own line of CLUSTER NODES: its id and the slot
// ranges it serves (open migrations, "[slot->-id]", are left out).
func myself(r *Redis) (string, [][2]int, error) {
	out, err := command(r.Addr(), "CLUSTER", "NODES")
	if err != nil {
		return "", nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") {
			continue
		}
		var slots [][2]int
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, found := strings.Cut(s, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return "", nil, fmt.Errorf("testenv: CLUSTER NODES slot range %q", s)
			}
			slots = append(slots, [2]int{a, b})
		}
		return f[0], slots, nil
	}
	return "", nil, fmt.Errorf("testenv: %s: no myself line in CLUSTER NODES", r.Addr())
}

// OtherPrimary returns a node of the cluster other than r.
func (c *RedisCluster) OtherPrimary(r *Redis) *Redis {
	for _, n := range c.Nodes {
		if n != r {
			return n
		}
	}
	return nil
}

// KeyOwner returns the primary that serves key's hash slot (KeySlot, then
// SlotOwner): the node a client that follows no redirect must be pointed at
// to reach key, or away from to be answered MOVED.
func (c *RedisCluster) KeyOwner(key string) (*Redis, error) {
	slot, err := c.KeySlot(key)
	if err != nil {
		return nil, fmt.Errorf("testenv: slot of key %q: %w", key, err)
	}
	r, err := c.SlotOwner(slot)
	if err != nil {
		return nil, fmt.Errorf("testenv: owner of key %q: %w", key, err)
	}
	return r, nil
}

// BeginKeyMigration opens the migration of key's slot from its owner to
// another primary (BeginSlotMigration): what a test of one lock, record or
// balance needs, since all of its keys share the key's hash tag.
func (c *RedisCluster) BeginKeyMigration(key string) (*SlotMigration, error) {
	slot, err := c.KeySlot(key)
	if err != nil {
		return nil, err
	}
	from, err := c.SlotOwner(slot)
	if err != nil {
		return nil, err
	}
	return c.BeginSlotMigration(slot, c.OtherPrimary(from))
}

// BeginSlotMigration opens the migration of slot from its owner to to:
// IMPORTING on the target first, then MIGRATING on the source (redis-cli's
// order, so that no ASK ever points at a node that would refuse it). No key
// moves yet.
func (c *RedisCluster) BeginSlotMigration(slot int, to *Redis) (*SlotMigration, error) {
	from, err := c.SlotOwner(slot)
	if err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("testenv: slot %d is already on %s", slot, to.Addr())
	}
	fromID, _, err := myself(from)
	if err != nil {
		return nil, err
	}
	toID, _, err := myself(to)
	if err != nil {
		return nil, err
	}
	s := strconv.Itoa(slot)
	if _, err := command(to.Addr(), "CLUSTER", "SETSLOT", s, "IMPORTING", fromID); err != nil {
		return nil, fmt.Errorf("testenv: SETSLOT %d IMPORTING on %s: %w", slot, to.Addr(), err)
	}
	if _, err := command(from.Addr(), "CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		return nil, fmt.Errorf("testenv: SETSLOT %d MIGRATING on %s: %w", slot, from.Addr(), err)
	}
	return &SlotMigration{c: c, Slot: slot, From: from, To: to, fromID: fromID, toID: toID}, nil
}

// Keys returns up to count keys of the slot still on the source
// (CLUSTER GETKEYSINSLOT).
func (m *SlotMigration) Keys(count int) ([]string, error) {
	return commandArray(m.From.Addr(), "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(m.Slot), strconv.Itoa(count))
}

// Move migrates keys from the source to the target in one MIGRATE ... KEYS
// (atomic per call: each key is restored on the target with its TTL, then
// deleted on the source). Keys the source does not have are skipped by
// Redis.
func (m *SlotMigration) Move(keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	host, port, err := splitAddr(m.To.Addr())
	if err != nil {
		return err
	}
	args := append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)
	out, err := command(m.From.Addr(), args...)
	if err != nil {
		return fmt.Errorf("testenv: MIGRATE %d keys of slot %d: %w", len(keys), m.Slot, err)
	}
	if out != "OK" && out != "NOKEY" {
		return fmt.Errorf("testenv: MIGRATE slot %d: %q", m.Slot, out)
	}
	m.MovedCount += len(keys)
	return nil
}

// MoveBatch moves up to n of the keys still on the source, as one step of
// redis-cli's loop, and returns how many it moved (0: none left).
func (m *SlotMigration) MoveBatch(n int) (int, error) {
	keys, err := m.Keys(n)
	if err != nil {
		return 0, err
	}
	return len(keys), m.Move(keys...)
}

// Finish moves every key left on the source in batches of batch, then
// assigns the slot to the target on the target, the source and every other
// primary (CLUSTER SETSLOT NODE; a node of Nodes a failover made a replica
// is left out), ending the migration. Finishing twice is
// a no-op.
func (m *SlotMigration) Finish(batch int) error {
	if m.finished {
		return nil
	}
	for {
		n, err := m.MoveBatch(batch)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	s := strconv.Itoa(m.Slot)
	order := []*Redis{m.To, m.From}
	for _, r := range m.c.Nodes {
		if r != m.To && r != m.From {
			order = append(order, r)
		}
	}
	var errs []error
	for _, r := range order {
		if _, err := command(r.Addr(), "CLUSTER", "SETSLOT", s, "NODE", m.toID); err != nil {
			if r != m.To && r != m.From && strings.Contains(err.Error(), "only with masters") {
				continue // a primary a failover demoted: it learns the slot's owner from its new primary
			}
			errs = append(errs, fmt.Errorf("testenv: SETSLOT %d NODE on %s: %w", m.Slot, r.Addr(), err))
		}
	}
	m.finished = len(errs) == 0
	return errors.Join(errs...)
}

// MigrateSlot moves slot to to in batches of batch keys, calling between
// after each batch (and once before the first) with the migration half
// done, so a test can act while some keys have moved and others have not.
// between returning an error stops the migration where it is (the slot
// stays half-migrated) and MigrateSlot returns it.
func (c *RedisCluster) MigrateSlot(slot int, to *Redis, batch int, between func(*SlotMigration) error) error {
	m, err := c.BeginSlotMigration(slot, to)
	if err != nil {
		return err
	}
	for {
		if between != nil {
			if err := between(m); err != nil {
				return err
			}
		}
		n, err := m.MoveBatch(batch)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	return m.Finish(batch)
}

func splitAddr(addr string) (host, port string, err error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", fmt.Errorf("testenv: address %q has no port", addr)
	}
	return addr[:i], addr[i+1:], nil
}
