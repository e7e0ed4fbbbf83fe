package redislock

import (
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/fleet/redisstore"
)

// FleetStore returns the store the Locker's heartbeat is published into
// (instrument.Govern calls it). A quorum Locker spans independent nodes,
// none of which is its store: it returns nil and publishes no heartbeat.
func (l *Locker) FleetStore() fleet.Store {
	switch s := l.store.(type) {
	case node:
		return redisstore.New(s.c)
	case fairNode:
		return redisstore.New(s.c)
	}
	return nil
}
