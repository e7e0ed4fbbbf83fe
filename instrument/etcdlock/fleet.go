package etcdlock

import (
	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/fleet/etcdstore"
)

// FleetStore returns the store the Locker's heartbeat is published into
// (instrument.Govern calls it).
func (l *Locker) FleetStore() fleet.Store { return etcdstore.New(l.c) }
