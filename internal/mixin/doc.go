// Package mixin is the config block the generated alert rules and
// dashboards share, in the style of the monitoring-mixins (kubernetes-mixin,
// etcd's contrib/mixin): the label selectors that find lockgov's series, the
// thresholds alerts fire at, and each alert's `for` duration. One Config
// feeds alerts.Groups, dashboards.All and the generator, so a selector or a
// threshold is written once.
//
// A Config comes from Default or from a YAML file (Load/Parse) that
// overrides some of its fields:
//
//	selectors:
//	  job: "payments-.*"
//	  cluster: "prod-eu"
//	thresholds:
//	  acquire_failure_ratio: 0.1
//	for:
//	  LockgovLockImmortal: 1m
//
// # Guarantees
//
// Parse reports every problem, each as a *policy.Error formatted
// "FILE:LINE: FIELD: problem"; a Config it returns has passed Validate
// (selectors are valid regular expressions, ratios lie in (0, 1], the
// degrade skew tier is below the reject tier, every `for` names a known
// alert). Defaults for the skew tiers are the policy's (policy.Default).
//
// # Failure modes
//
// Selectors are inserted into PromQL as regular-expression matchers
// (label=~"..."): a selector that matches nothing makes every panel empty
// and every alert silent, which no test here can see: after changing a
// selector, open the dashboards and see that they show data.
package mixin
