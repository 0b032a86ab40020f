package main

import (
	"runtime/debug"
	"strings"
)

// version is the server's version, as `superego version` prints it and
// every experiment records it: the module's version and the VCS revision
// the build information holds ("v1.4.0 revision 5e3c…", "(devel) revision
// 5e3c… (2026-11-25T12:00:00Z), modified"). A binary built outside a git
// checkout, or with -buildvcs=false, says it has no revision.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(no build information)"
	}
	return versionOf(info)
}

func versionOf(info *debug.BuildInfo) string {
	setting := map[string]string{}
	for _, s := range info.Settings {
		setting[s.Key] = s.Value
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	rev := setting["vcs.revision"]
	if rev == "" {
		return v + ", no VCS revision in its build information (built outside a git checkout, or with -buildvcs=false)"
	}
	var b strings.Builder
	b.WriteString(v + " revision " + rev)
	if t := setting["vcs.time"]; t != "" {
		b.WriteString(" (" + t + ")")
	}
	if setting["vcs.modified"] == "true" {
		b.WriteString(", modified")
	}
	return b.String()
}
