package detectors

import (
	"fmt"
	"strings"

	"github.com/lockgov/lockgov/instrument/fleet"
	"github.com/lockgov/lockgov/instrument/lockvalue"
	"github.com/lockgov/lockgov/internal/shellquote"
)

// holderString names a holder for a finding's detail: service, instance,
// host and pid, whatever is known.
func holderString(v any) string { return holderWords(v, func(s string) string { return s }) }

// holderQuoted names a holder for an action: its names, which the holder
// wrote, quoted for a shell (shellquote.Quote).
func holderQuoted(v any) string { return holderWords(v, shellquote.Quote) }

func holderWords(v any, quote func(string) string) string {
	var service, instance, host string
	var pid int
	switch h := v.(type) {
	case lockvalue.Holder:
		if h.Foreign {
			return "an unknown holder (a value lockgov did not write)"
		}
		service, instance, host, pid = h.Service, h.Instance, h.Host, h.PID
	case *fleet.Heartbeat:
		service, instance, host, pid = h.Service, h.Instance, h.Host, h.PID
	}
	var parts []string
	if service != "" {
		parts = append(parts, "service "+quote(service))
	}
	if instance != "" {
		parts = append(parts, "instance "+quote(instance))
	}
	if host != "" && host != instance {
		parts = append(parts, "host "+quote(host))
	}
	if pid != 0 {
		parts = append(parts, fmt.Sprintf("pid %d", pid))
	}
	if len(parts) == 0 {
		return "an unnamed holder"
	}
	return strings.Join(parts, ", ")
}
