package agent

import (
	"embed"
	"io/fs"
	"net/http"
)

// consoleFS holds the console: one page, one script, one stylesheet, with
// no framework and nothing loaded from elsewhere. The script reads
// /api/v1/findings, /api/v1/locks and /api/v1/instances every few seconds.
//
//go:embed console
var consoleFS embed.FS

// consoleHandler serves / (the page) and /console/ (its assets).
func consoleHandler(mux *http.ServeMux) {
	sub, err := fs.Sub(consoleFS, "console")
	if err != nil {
		panic(err) // the embedded directory exists at build time
	}
	page, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		panic(err)
	}
	mux.Handle("GET /console/", http.StripPrefix("/console/", http.FileServerFS(sub)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		_, _ = w.Write(page)
	})
}
