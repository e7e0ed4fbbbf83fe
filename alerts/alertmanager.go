package alerts

import (
	"bytes"
	"fmt"

	"github.com/lockgov/lockgov/internal/mixin"
	"go.yaml.in/yaml/v3"
)

// Receivers of the example route tree.
const (
	PagerReceiver  = "pager"  // critical alerts: wake someone up
	TicketReceiver = "ticket" // warnings: a ticket for working hours
)

// GroupBy is how the example routes group alerts: one notification per
// alert name and lock pattern (lock alerts) or service (skew, IDs, tokens).
var GroupBy = []string{"alertname", "cluster", "namespace", "job", "lock_pattern", "service"}

type amConfig struct {
	Route        amRoute     `yaml:"route"`
	InhibitRules []amInhibit `yaml:"inhibit_rules"`
	Receivers    []amReceive `yaml:"receivers"`
}

type amRoute struct {
	Receiver       string    `yaml:"receiver"`
	Matchers       []string  `yaml:"matchers,omitempty"`
	GroupBy        []string  `yaml:"group_by,omitempty"`
	GroupWait      string    `yaml:"group_wait,omitempty"`
	GroupInterval  string    `yaml:"group_interval,omitempty"`
	RepeatInterval string    `yaml:"repeat_interval,omitempty"`
	Routes         []amRoute `yaml:"routes,omitempty"`
}

type amInhibit struct {
	SourceMatchers []string `yaml:"source_matchers"`
	TargetMatchers []string `yaml:"target_matchers"`
	Equal          []string `yaml:"equal"`
}

type amReceive struct {
	Name             string        `yaml:"name"`
	PagerdutyConfigs []amPagerDuty `yaml:"pagerduty_configs,omitempty"`
	WebhookConfigs   []amWebhook   `yaml:"webhook_configs,omitempty"`
}

type amPagerDuty struct {
	RoutingKey string `yaml:"routing_key"`
}

type amWebhook struct {
	URL string `yaml:"url"`
}

// AlertmanagerExample renders an example Alertmanager configuration for
// the rules: critical alerts go to a pager receiver, warnings to a ticket
// receiver, grouped by GroupBy; a warning is inhibited while a critical
// alert of the same name fires, and LockgovClockSkewDegraded while
// LockgovClockSkewReject fires for the same instance. The receivers are
// placeholders to replace (a PagerDuty routing key, a webhook URL).
func AlertmanagerExample(mixin.Config) ([]byte, error) {
	c := amConfig{
		Route: amRoute{
			Receiver: TicketReceiver, GroupBy: GroupBy,
			GroupWait: "30s", GroupInterval: "5m", RepeatInterval: "12h",
			Routes: []amRoute{
				{Receiver: PagerReceiver, Matchers: []string{`severity="critical"`}, GroupWait: "10s", RepeatInterval: "1h"},
				{Receiver: TicketReceiver, Matchers: []string{`severity="warning"`}},
			},
		},
		InhibitRules: []amInhibit{
			{SourceMatchers: []string{`severity="critical"`}, TargetMatchers: []string{`severity="warning"`}, Equal: []string{"alertname"}},
			{SourceMatchers: []string{`alertname="LockgovClockSkewReject"`}, TargetMatchers: []string{`alertname="LockgovClockSkewDegraded"`}, Equal: []string{"service", "instance"}},
		},
		Receivers: []amReceive{
			{Name: PagerReceiver, PagerdutyConfigs: []amPagerDuty{{RoutingKey: "REPLACE-WITH-PAGERDUTY-ROUTING-KEY"}}},
			{Name: TicketReceiver, WebhookConfigs: []amWebhook{{URL: "http://ticket-bridge.example:8080/alertmanager"}}},
		},
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("alerts: %w", err)
	}
	return b.Bytes(), nil
}
