package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lockgov/lockgov/internal/testenv"
)

// TestConsole_ServesThePageItsAssetsAndTheRemediationFlag holds what the
// console's script relies on: / is the page, its script and stylesheet are
// served from /console/ (nothing from elsewhere), and /api/v1/findings says
// whether remediation is on, so the buttons show only then.
func TestConsole_ServesThePageItsAssetsAndTheRemediationFlag(t *testing.T) {
	r := testenv.NewRedis(t)
	for _, token := range []string{"", "s3cret"} {
		cfg := testConfig("console")
		cfg.Redis = []string{"redis://" + r.Addr()}
		cfg.RemediationToken = token
		a := start(t, cfg)
		code, page := get(t, a.URL())
		if code != 200 || !strings.Contains(page, `<script src="/console/app.js">`) || !strings.Contains(page, `href="/console/style.css"`) {
			t.Fatalf("GET / = %d %q: want the console page", code, page)
		}
		if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
			t.Errorf("the page loads something from elsewhere: %s", page)
		}
		for _, asset := range []string{"console/app.js", "console/style.css"} {
			if code, body := get(t, a.URL()+asset); code != 200 || body == "" {
				t.Errorf("GET /%s = %d, %d bytes", asset, code, len(body))
			}
		}
		_, body := get(t, a.URL()+"api/v1/findings")
		var doc struct{ Remediation *bool }
		if err := json.Unmarshal([]byte(body), &doc); err != nil || doc.Remediation == nil {
			t.Fatalf("findings %s: want a remediation field (%v)", body, err)
		}
		if *doc.Remediation != (token != "") {
			t.Errorf("remediation = %v with token %q", *doc.Remediation, token)
		}
	}
}
