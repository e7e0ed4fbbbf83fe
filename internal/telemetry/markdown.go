package telemetry

import (
	"fmt"
	"strings"
)

// Markdown renders Table as the README's metric table: one row per metric
// with its type and labels, and the fixed values of the labels that have
// them.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| metric | type | labels |\n|---|---|---|\n")
	for _, m := range Table {
		if m.Planned != "" {
			continue
		}
		labels := make([]string, 0, len(m.Labels))
		for _, l := range m.Labels {
			if vs := m.Values[l]; len(vs) > 0 {
				l += " (" + strings.Join(vs, ", ") + ")"
			}
			labels = append(labels, l)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", m.Name, m.Kind, strings.Join(labels, ", "))
	}
	return b.String()
}
