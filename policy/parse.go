package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Load reads and parses the policy file at path. Errors name the file, the
// line and the field; a missing file is an error naming path.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a YAML policy; name is used in error messages. Fields a
// pattern does not set are inherited from defaults, and fields the file
// does not set from Default(). An empty document gives Default(). The
// result has passed Validate.
//
// Every problem is reported, each as a *Error formatted
// "NAME:LINE: FIELD: problem", joined with errors.Join.
func Parse(name string, data []byte) (*Policy, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: name, Line: extra.Line, Problem: "more than one YAML document"}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(name, err)
	}
	p := &parser{file: name, lines: map[string]int{}}
	pol := Default()
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != 0 && !isNull(doc) {
		p.policy(doc, pol)
	}
	for _, e := range pol.validate(p.explicit) {
		e.File, e.Line = name, p.line(e.Field)
		p.errs = append(p.errs, e)
	}
	if err := joinErrors(p.errs); err != nil {
		return nil, err
	}
	return pol, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlError(name string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: name, Line: line, Problem: "yaml: " + m[2]}
	}
	return &Error{File: name, Problem: msg}
}

type parser struct {
	file  string
	lines map[string]int // field path -> line of its key, for fields the file sets
	errs  []*Error
}

func (p *parser) fail(n *yaml.Node, path, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: n.Line, Field: path, Problem: fmt.Sprintf(format, args...)})
}

func (p *parser) explicit(path string) bool {
	_, ok := p.lines[path]
	return ok
}

// line returns the line of path, or of its nearest ancestor the file sets.
func (p *parser) line(path string) int {
	for path != "" {
		if l, ok := p.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

type field struct {
	key, val *yaml.Node
	path     string
}

// fields returns the fields of mapping n by name, reporting a non-mapping,
// unknown names and duplicates.
func (p *parser) fields(n *yaml.Node, path string, known ...string) map[string]field {
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "must be a mapping, got %s", kind(n))
		return nil
	}
	out := make(map[string]field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		name := k.Value
		fp := name
		if path != "" {
			fp = path + "." + name
		}
		switch {
		case k.Kind != yaml.ScalarNode:
			p.fail(k, path, "keys must be strings, got %s", kind(k))
		case !slices.Contains(known, name):
			p.fail(k, fp, "unknown field (known: %s)", strings.Join(known, ", "))
		case out[name].key != nil:
			p.fail(k, fp, "duplicate field (first at line %d)", out[name].key.Line)
		default:
			out[name] = field{key: k, val: v, path: fp}
			p.lines[fp] = k.Line
		}
	}
	return out
}

var (
	topFields     = []string{"version", "defaults", "patterns", "skew", "max_patterns"}
	ruleFields    = []string{"mode", "ttl", "min_ttl", "max_ttl", "max_hold", "wait"}
	patternFields = append([]string{"pattern"}, ruleFields...)
	waitFields    = []string{"strategy", "backoff", "min", "max", "attempts", "poll_interval"}
	skewFields    = []string{"degrade", "reject", "degrade_ttl_factor"}
)

func (p *parser) policy(n *yaml.Node, pol *Policy) {
	fs := p.fields(n, "", topFields...)
	if fs == nil {
		return
	}
	if f, ok := fs["version"]; ok {
		if v, ok := p.integer(f); ok && v != 1 {
			p.fail(f.key, f.path, "%d is not supported (only 1)", v)
		}
	}
	if f, ok := fs["defaults"]; ok && !isNull(f.val) {
		p.rule(f.val, f.path, &pol.Defaults, ruleFields)
	}
	if f, ok := fs["patterns"]; ok && !isNull(f.val) {
		if f.val.Kind != yaml.SequenceNode {
			p.fail(f.val, f.path, "must be a list, got %s", kind(f.val))
		} else {
			for i, item := range f.val.Content {
				item = resolve(item)
				path := f.path + "[" + strconv.Itoa(i) + "]"
				p.lines[path] = item.Line
				r := pol.Defaults
				if p.rule(item, path, &r, patternFields) {
					pol.Patterns = append(pol.Patterns, r)
				}
			}
		}
	}
	if f, ok := fs["skew"]; ok && !isNull(f.val) {
		if sf := p.fields(f.val, f.path, skewFields...); sf != nil {
			p.duration(sf, "degrade", &pol.Skew.Degrade)
			p.duration(sf, "reject", &pol.Skew.Reject)
			if f, ok := sf["degrade_ttl_factor"]; ok {
				if v, ok := p.scalar(f, "a number"); ok {
					x, err := strconv.ParseFloat(v, 64)
					if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
						p.fail(f.key, f.path, "%q is not a number", v)
					} else {
						pol.Skew.DegradeTTLFactor = x
					}
				}
			}
		}
	}
	if f, ok := fs["max_patterns"]; ok {
		if v, ok := p.integer(f); ok {
			pol.MaxPatterns = v
		}
	}
}

// rule overwrites the fields of r that n sets. It reports false when n is
// not a mapping.
func (p *parser) rule(n *yaml.Node, path string, r *Rule, known []string) bool {
	fs := p.fields(n, path, known...)
	if fs == nil {
		return false
	}
	if slices.Contains(known, "pattern") {
		if f, ok := fs["pattern"]; ok {
			if v, ok := p.scalar(f, "a string"); ok {
				r.Pattern = v
			}
		} else {
			p.lines[path+".pattern"] = n.Line
			r.Pattern = ""
		}
	}
	if f, ok := fs["mode"]; ok {
		if v, ok := p.scalar(f, "a string"); ok {
			m, err := ParseMode(v)
			if err != nil {
				p.fail(f.key, f.path, "%v", err)
			} else {
				r.Mode = m
			}
		}
	}
	p.duration(fs, "ttl", &r.TTL)
	p.duration(fs, "min_ttl", &r.MinTTL)
	p.duration(fs, "max_ttl", &r.MaxTTL)
	p.duration(fs, "max_hold", &r.MaxHold)
	f, ok := fs["wait"]
	if !ok || isNull(f.val) {
		return true
	}
	wf := p.fields(f.val, f.path, waitFields...)
	if wf == nil {
		return true
	}
	if f, ok := wf["strategy"]; ok {
		if v, ok := p.scalar(f, "a string"); ok {
			s, err := ParseWaitStrategy(v)
			if err != nil {
				p.fail(f.key, f.path, "%v", err)
			} else {
				r.Wait.Strategy = s
			}
		}
	}
	if f, ok := wf["backoff"]; ok {
		if v, ok := p.scalar(f, "a string"); ok {
			b, err := ParseBackoffKind(v)
			if err != nil {
				p.fail(f.key, f.path, "%v", err)
			} else {
				r.Wait.Backoff = b
			}
		}
	}
	p.duration(wf, "min", &r.Wait.Min)
	p.duration(wf, "max", &r.Wait.Max)
	p.duration(wf, "poll_interval", &r.Wait.PollInterval)
	if f, ok := wf["attempts"]; ok {
		if v, ok := p.integer(f); ok {
			r.Wait.Attempts = v
		}
	}
	return true
}

// scalar returns the text of a scalar field value, reporting anything else
// as not being what.
func (p *parser) scalar(f field, what string) (string, bool) {
	if f.val.Kind != yaml.ScalarNode || isNull(f.val) {
		p.fail(f.key, f.path, "must be %s, got %s", what, kind(f.val))
		return "", false
	}
	return f.val.Value, true
}

func (p *parser) duration(fs map[string]field, name string, dst *time.Duration) {
	f, ok := fs[name]
	if !ok {
		return
	}
	v, ok := p.scalar(f, "a duration (e.g. 30s, 250ms)")
	if !ok {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		p.fail(f.key, f.path, "%q is not a duration (use a Go duration with a unit, e.g. 30s, 250ms)", v)
		return
	}
	*dst = d
}

func (p *parser) integer(f field) (int, bool) {
	v, ok := p.scalar(f, "an integer")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(v)
	if err != nil {
		p.fail(f.key, f.path, "%q is not an integer", v)
		return 0, false
	}
	return i, true
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kind(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "null"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "an unsupported node"
}
