// Package flows holds the flow definitions shipped with superego. The
// server reads them from disk (--flows); FS embeds them for binaries that
// carry their own, such as sg.
package flows

import "embed"

//go:embed *.json
var FS embed.FS
