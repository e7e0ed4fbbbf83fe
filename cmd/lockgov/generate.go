package main

import (
	"errors"

	"github.com/lockgov/lockgov/internal/generate"
	"github.com/lockgov/lockgov/internal/mixin"
)

// runGenerate is `lockgov generate --out DIR [--format plain|operator]
// [--config FILE]` and `lockgov generate --check DIR`: it writes the
// dashboards, rules and Alertmanager routes into out, or with check set
// compares check with what it would write. A stale check returns an error
// matching generate.ErrStale that lists the stale, missing and extra files
// (the command exits 1 on it; other errors are bad input, exit 2). An
// invalid config file is an error naming file, line and field.
func runGenerate(out, format, config, check string) error {
	f, err := generate.ParseFormat(format)
	if err != nil {
		return err
	}
	cfg := mixin.Default()
	if config != "" {
		if cfg, err = mixin.Load(config); err != nil {
			return err
		}
	}
	switch {
	case check != "" && out != "":
		return errors.New("generate: --out and --check exclude each other")
	case check != "":
		return generate.Check(check, f, cfg)
	case out == "":
		return errors.New("generate: --out DIR or --check DIR is required")
	}
	return generate.Generate(out, f, cfg)
}
