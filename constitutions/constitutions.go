// Package constitutions holds the constitutions shipped with superego. The
// server reads them from disk (--constitutions); FS embeds them for binaries
// that carry their own, such as sg.
package constitutions

import "embed"

//go:embed *.md
var FS embed.FS
