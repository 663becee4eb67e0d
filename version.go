package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// version and revision are set with -ldflags "-X main.version=... -X main.revision=..."
// where the build has no VCS information (the Docker build: .git is not in its context);
// otherwise they come from the module and VCS data Go embeds in the binary.
var version, revision string

// printVersion is `atrium version`: module version, VCS revision (and whether the tree
// was modified), Go version.
func printVersion(w io.Writer) error {
	v, rev, modified, goVersion := version, revision, "", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if v == "" {
			v = bi.Main.Version // "(devel)" for a build from a checkout
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && rev == "":
				rev = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				modified = " (modified)"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if rev == "" {
		rev = "unknown"
	}
	_, err := fmt.Fprintf(w, "atrium %s\nrevision %s%s\n%s\n", v, rev, modified, goVersion)
	return err
}
