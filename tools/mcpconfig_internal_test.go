package tools

import (
	"slices"
	"testing"
)

func TestSecretName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"GITHUB_TOKEN": true, "API_KEY": true, "SUPEREGO_API_KEYS": true, "AWS_SECRET_ACCESS_KEY": true,
		"PGPASSWORD": true, "DB_PASSWD": true, "GOOGLE_APPLICATION_CREDENTIALS": true, "BASIC_AUTH": true,
		"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "X-Api-Key": true, "x-apikey": true,
		"SLACK_BOT_TOKEN": true, "accessToken": true,
		"GIT_AUTHOR_NAME": false, "MODE": false, "HOME": false, "MONKEY_MODE": false, "KEYBOARD": false,
		"Content-Type": false, "User-Agent": false, "DATA_DIR": false,
	} {
		if got := secretName(name); got != want {
			t.Errorf("secretName(%q) = %v, want %v", name, got, want)
		}
	}
}

// A header's credential is a secret with and without its scheme; values
// too short to find safely, and plain values, are not.
func TestSecrets(t *testing.T) {
	t.Parallel()
	s := MCPServer{
		Env:     map[string]string{"MODE": "production", "PIN": "12", "API_KEY": "abc", "TOKEN": "tok-1234"},
		Headers: map[string]string{"Authorization": "Bearer tok-5678", "Accept": "text/plain"},
		Secrets: []string{"tok-1234", "from-a-variable"},
	}
	want := []string{"Bearer tok-5678", "from-a-variable", "tok-1234", "tok-5678"}
	if got := s.secrets(); !slices.Equal(got, want) {
		t.Errorf("secrets %q, want %q", got, want)
	}
}
