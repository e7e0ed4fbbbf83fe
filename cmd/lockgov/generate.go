package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/lockgov/lockgov/internal/generate"
	"github.com/lockgov/lockgov/internal/mixin"
)

// newGenerateCmd is `lockgov generate`: dashboards, alert rules and
// Alertmanager routes for a GitOps repository.
func newGenerateCmd() *cobra.Command {
	var out, format, config, check string
	cmd := &cobra.Command{
		Use:   "generate --out DIR [--format plain|operator] [--config FILE] | --check DIR",
		Short: "write Grafana dashboards, Prometheus rules and Alertmanager routes (or check a folder is current)",
		Long: `generate writes dashboards/*.json, rules/lockgov.rules.yaml and
alertmanager/routes.example.yaml into --out, byte for byte the same on every
run. --format operator writes GrafanaDashboard and PrometheusRule manifests
instead. --check DIR compares DIR with what generate would write and exits 1
listing stale, missing and extra files: run it in the GitOps repository's CI.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			err := runGenerate(out, format, config, check)
			if err != nil && !errors.Is(err, generate.ErrStale) {
				return UsageError{err}
			}
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write into")
	cmd.Flags().StringVar(&format, "format", "plain", "plain files, or operator manifests (GrafanaDashboard, PrometheusRule)")
	cmd.Flags().StringVar(&config, "config", "", "YAML config block: selectors, thresholds, for durations")
	cmd.Flags().StringVar(&check, "check", "", "exit 1 when this GitOps directory is stale")
	return cmd
}

// runGenerate writes the dashboards, rules and Alertmanager routes into
// out, or with check set compares check with what it would write. A stale
// check returns an error matching generate.ErrStale that lists the stale,
// missing and extra files (exit 1); other errors are bad input (exit 2). An
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
		return errors.New("--out and --check exclude each other")
	case check != "":
		err := generate.Check(check, f, cfg)
		if stale, ok := errors.AsType[*generate.StaleError](err); ok {
			stale.Command = generate.Command(check, f, config)
		}
		return err
	case out == "":
		return errors.New("--out DIR or --check DIR is required")
	}
	return generate.Generate(out, f, cfg)
}
