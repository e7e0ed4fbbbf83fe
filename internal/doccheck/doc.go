// Package doccheck holds the tests that keep the user-facing documentation
// true: the Go snippets of README.md and docs/*.md compile against the
// current API. It has no code of its own.
package doccheck
