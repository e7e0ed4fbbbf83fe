package mixin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/lockgov/lockgov/policy"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// Load reads and parses the config file at path.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("mixin config: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a YAML config block over Default; name is used in error
// messages. Every problem is reported, each a *policy.Error
// "NAME:LINE: FIELD: problem", joined with errors.Join.
func Parse(name string, data []byte) (Config, error) {
	cfg := Default()
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, yamlError(name, err)
	}
	p := &parser{file: name, lines: map[string]int{}}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != 0 && doc.Tag != "!!null" {
		p.config(doc, &cfg)
	}
	for _, e := range cfg.Validate() {
		e.File, e.Line = name, p.line(e.Field)
		p.errs = append(p.errs, e)
	}
	if len(p.errs) > 0 {
		errs := make([]error, len(p.errs))
		for i, e := range p.errs {
			errs[i] = e
		}
		return Config{}, errors.Join(errs...)
	}
	return cfg, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlError(name string, err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &policy.Error{File: name, Line: line, Problem: "yaml: " + m[2]}
	}
	return &policy.Error{File: name, Problem: err.Error()}
}

type parser struct {
	file  string
	lines map[string]int // field path -> line of its key
	errs  []*policy.Error
}

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, &policy.Error{File: p.file, Line: n.Line, Field: field, Problem: fmt.Sprintf(format, args...)})
}

// line returns the line of field, or of its nearest parent the file sets.
func (p *parser) line(field string) int {
	for field != "" {
		if l, ok := p.lines[field]; ok {
			return l
		}
		i := strings.LastIndexByte(field, '.')
		if i < 0 {
			break
		}
		field = field[:i]
	}
	return 0
}

// mapping calls set for every key of mapping n, reporting a non-mapping,
// duplicate keys and keys set refuses (it returns false for unknown keys).
func (p *parser) mapping(n *yaml.Node, path string, known []string, set func(key string, k, v *yaml.Node, field string)) {
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "must be a mapping")
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := k.Value
		if path != "" {
			field = path + "." + k.Value
		}
		if first, dup := seen[k.Value]; dup {
			p.fail(k, field, "duplicate field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		if known != nil && !slices.Contains(known, k.Value) {
			p.fail(k, field, "unknown field (known: %s)", strings.Join(known, ", "))
			continue
		}
		p.lines[field] = k.Line
		set(k.Value, k, v, field)
	}
}

func (p *parser) config(n *yaml.Node, c *Config) {
	p.mapping(n, "", []string{"selectors", "thresholds", "for", "runbook_base"}, func(key string, k, v *yaml.Node, field string) {
		switch key {
		case "selectors":
			s := &c.Selectors
			p.mapping(v, field, []string{"job", "agent_job", "cluster", "namespace"}, func(key string, _, v *yaml.Node, field string) {
				dst := map[string]*string{"job": &s.Job, "agent_job": &s.AgentJob, "cluster": &s.Cluster, "namespace": &s.Namespace}[key]
				p.str(v, field, dst)
			})
		case "thresholds":
			t := &c.Thresholds
			ratios := map[string]*float64{
				"acquire_failure_ratio": &t.AcquireFailureRatio, "idempotency_error_ratio": &t.IdempotencyErrorRatio,
				"quota_error_ratio": &t.QuotaErrorRatio, "policy_violations_per_hour": &t.PolicyViolationsPerHour,
			}
			durations := map[string]*model.Duration{
				"acquire_wait_p99": &t.AcquireWaitP99, "skew_degrade": &t.SkewDegrade, "skew_reject": &t.SkewReject,
				"snowflake_lifetime_low": &t.SnowflakeLifetimeLow, "agent_scan_missing": &t.AgentScanMissing,
				"rate_window": &t.RateWindow,
			}
			p.mapping(v, field, nil, func(key string, k, v *yaml.Node, field string) {
				if dst, ok := ratios[key]; ok {
					p.number(v, field, dst)
				} else if dst, ok := durations[key]; ok {
					p.duration(v, field, dst)
				} else {
					p.fail(k, field, "unknown field (known: %s)", strings.Join(append(sortedKeys(ratios), sortedKeys(durations)...), ", "))
				}
			})
		case "for":
			p.mapping(v, field, nil, func(key string, _, v *yaml.Node, field string) {
				var d model.Duration
				if p.duration(v, field, &d) {
					c.For[key] = d
				}
			})
		case "runbook_base":
			p.str(v, field, &c.RunbookBase)
		}
	})
}

func (p *parser) scalar(n *yaml.Node, field, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.fail(n, field, "must be %s", what)
		return "", false
	}
	return n.Value, true
}

func (p *parser) str(n *yaml.Node, field string, dst *string) {
	if v, ok := p.scalar(n, field, "a string"); ok {
		*dst = v
	}
}

func (p *parser) number(n *yaml.Node, field string, dst *float64) {
	v, ok := p.scalar(n, field, "a number")
	if !ok {
		return
	}
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		p.fail(n, field, "%q is not a number", v)
		return
	}
	*dst = x
}

func (p *parser) duration(n *yaml.Node, field string, dst *model.Duration) bool {
	v, ok := p.scalar(n, field, "a duration")
	if !ok {
		return false
	}
	d, err := model.ParseDuration(v)
	if err != nil {
		p.fail(n, field, "%q is not a duration (like 30s, 5m, 1h, 7d)", v)
		return false
	}
	*dst = d
	return true
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
