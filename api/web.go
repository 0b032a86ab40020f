package api

import (
	"embed"
	"net/http"
)

//go:embed web
var web embed.FS

// static serves an embedded file: the page and the API description are
// part of the binary, and nothing is fetched from elsewhere.
func static(contentType, name string) http.HandlerFunc {
	body, err := web.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Write(body)
	}
}
